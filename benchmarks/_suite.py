"""The floors and figures of the benchmark suite, measured on one anyio backend.

Floors (measured in the same run, interleaved with the figures):

* ``checkpoint``: one ``await anyio.lowlevel.checkpoint()``.
* ``dict_admit``: one dict insert plus one list append of a small tuple.
* ``event_wake``: ``anyio.Event.set()`` to the first line after ``await event.wait()``
  in a parked task.
* ``inbox_baseline``: the manager-task design ``LiveRuntime`` refuses to be (C8):
  ``submit`` sends into an anyio memory object stream, a manager task receives,
  appends to the boundary queue and sets the engine's event; from the send to the
  engine's first line after its wait.

Each figure, its floor and its target are listed in ``_figures`` below and
explained in ``docs/performance.md``.
"""

from __future__ import annotations

import gc
import math
import random
import statistics
import sys
import tracemalloc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from time import thread_time_ns
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from live_steering import Generation, Input, LiveRuntime

from ._timing import Figure, Samples, figure, no_gc, perf_counter_ns

__all__ = ["FULL", "QUICK", "TINY", "Settings", "run_backend"]


@dataclass(frozen=True)
class Settings:
    """How much to measure."""

    rounds: int
    """Rounds of interleaved batches; every ``ns`` value is a median over this many batches."""
    wake_samples: int
    """Wakes timed per batch of ``event_wake``, ``wake_latency`` and ``inbox_baseline``."""
    runtimes: int
    """Live runtimes for ``runtimes_scale`` (the issue asks for 10,000)."""
    memory_runtimes: int
    """Runtimes traced for ``runtime_memory``."""
    hook_runs: int = 40
    """Processes started on each side of ``hook_command`` (``bench_hook.py``)."""
    integration_rounds: int = 2
    """Rounds of the ``integration_overhead_*`` figures (one agent run per side per round)."""


FULL = Settings(
    rounds=1_000,
    wake_samples=40,
    runtimes=10_000,
    memory_runtimes=2_000,
    hook_runs=60,
    integration_rounds=600,
)
QUICK = Settings(
    rounds=200,
    wake_samples=20,
    runtimes=10_000,
    memory_runtimes=1_000,
    hook_runs=30,
    integration_rounds=150,
)
#: For the test of the machinery only: the numbers it produces mean nothing.
TINY = Settings(rounds=2, wake_samples=2, runtimes=20, memory_runtimes=10, hook_runs=2)

STEER_TEXT = "Use the corrected path"
BATCH = 10
"""Submissions per timed batch of the submit figures."""
PREFILL = 10
"""Identities a runtime holds before ``submit_queued`` is timed."""
SCALE_PREFILL = 1_990
"""Identities held before the ``identity_scale`` batch: the batch fills the 2,000 cap."""
BOUNDARY_SMALL = 100
BOUNDARY_LARGE = 1_000
BOUNDARY_SINGLES = 100
"""One-input boundaries timed per batch of ``boundary_single``, one after another: as many as
the ``checkpoint`` floor times per batch, so figure and floor are both a steady state. A batch
of 10 (before 2026-12-06) read 1.32-1.40 on asyncio where a batch of 100 reads
1.09-1.12: its first boundaries meet caches the shuffled probes before it cooled
(docs/performance.md, "First boundaries of a batch")."""
FIRST_TEN = 10
"""The first boundaries of each batch, whose mean is reported beside the figure (``first_ten``)."""
SUBSCRIBERS = 3
WARM_UP = 10
EVENT_LOG_SIZE = 1_024
"""``LiveRuntime``'s default ``event_log_size``."""
CHECKPOINT_BATCH = 100
DICT_BATCH = 1_000
ROTATE_AFTER = 1_900
"""Wakes served by one runtime of the wake rig before it moves on (the identity cap is 2,000)."""
IDENTITY_CAP = 2_000
IDENTITY_TEXT_CHARS = 200

Probe = Callable[[int], Awaitable[None]]


def _inputs(prefix: str, count: int) -> list[Input]:
    return [Input("steer", STEER_TEXT, id=f"{prefix}-{i}") for i in range(count)]


async def _write_nothing(input: Input, metadata: Mapping[str, Any]) -> None:
    """The context writer of the boundary figures: does nothing, asynchronously."""


async def _open(runtime: LiveRuntime) -> Generation:
    """Enter a generation through the engine API; it stays open until the runtime is dropped."""
    gen = runtime.open_generation()
    await gen.__aenter__()
    return gen


def _fill_event_log(runtime: LiveRuntime) -> None:
    """Bring a fresh runtime's bounded event log to its steady state: full, dropping its oldest.

    A runtime that has run for a while always has a full log, so every event it
    publishes also pushes one out. Refusals fill it without using an identity.
    """
    filler = Input("steer", STEER_TEXT, id="filler")
    for _ in range(EVENT_LOG_SIZE):
        runtime.submit_steering_nowait(filler, "not-the-running-generation")
    stats = runtime.statistics()
    if stats.events_logged != EVENT_LOG_SIZE or not stats.events_dropped:
        raise RuntimeError("the event log is not in its steady state")


async def _prefilled(count: int, **options: Any) -> tuple[LiveRuntime, Generation]:
    """A fresh runtime with an open generation holding ``count`` pending inputs.

    The last ``WARM_UP`` of them go through the awaited ``submit_steering``, so that
    a batch timed next runs with the submit path warm in the caches, whatever
    number of identities was filled in before it.
    """
    runtime = LiveRuntime(**options)
    gen = await _open(runtime)
    _fill_event_log(runtime)
    cold = max(count - WARM_UP, 0)
    for item in _PREFILL_INPUTS[:cold]:
        if not runtime.submit_steering_nowait(item, gen.id).accepted:
            raise RuntimeError("prefill was refused")
    for item in _PREFILL_INPUTS[cold:count]:
        if not (await runtime.submit_steering(item, gen.id)).accepted:
            raise RuntimeError("prefill was refused")
    return runtime, gen


_PREFILL_INPUTS = _inputs("held", SCALE_PREFILL)
_NEW_INPUTS = _inputs("new", BATCH)
#: Equal to ``_NEW_INPUTS`` but other objects, as a host rebuilding its inputs from its store makes them.
_REPEATS = [Input(str(item.kind), "".join(item.text), id="".join(item.id)) for item in _NEW_INPUTS]


async def _time_submits(runtime: LiveRuntime, generation_id: str, inputs: Sequence[Input]) -> float:
    """Per-submission ns of ``await runtime.submit_steering(...)`` over ``inputs``."""
    submit = runtime.submit_steering
    with no_gc():
        start = perf_counter_ns()
        for item in inputs:
            await submit(item, generation_id)
        stop = perf_counter_ns()
    return (stop - start) / len(inputs)


def _time_submits_nowait(runtime: LiveRuntime, generation_id: str, inputs: Sequence[Input]) -> float:
    """Per-submission ns of ``runtime.submit_steering_nowait(...)`` over ``inputs`` (it never yields)."""
    submit = runtime.submit_steering_nowait
    with no_gc():
        start = perf_counter_ns()
        for item in inputs:
            submit(item, generation_id)
        stop = perf_counter_ns()
    return (stop - start) / len(inputs)


def _require(runtime: LiveRuntime, *, accepted: int, repeated: int = 0) -> None:
    """Make sure a batch took the path it claims to measure (the log filler's refusals aside)."""
    stats = runtime.statistics()
    if stats.accepted != accepted or stats.repeated != repeated or stats.refused not in (0, EVENT_LOG_SIZE):
        raise RuntimeError(f"benchmark took the wrong path: {stats}")


def _wake_batch(latencies: list[int]) -> float:
    """A batch of wakes: the first one (cold, after the other probes ran) is dropped, and the
    median of the rest is taken, since each wake is timed on its own and one preempted wake
    must not move the batch."""
    return statistics.median(latencies[1:])


class _WakeRig:
    """A parked task, the time it woke and an event it sets once it is parked again."""

    def __init__(self) -> None:
        self.woke_at = 0
        self.parked = anyio.Event()
        self.event = anyio.Event()

    async def parked_again(self) -> None:
        await self.parked.wait()
        self.parked = anyio.Event()


async def _event_wake_task(rig: _WakeRig) -> None:
    rig.parked.set()
    while True:
        await rig.event.wait()
        rig.woke_at = perf_counter_ns()
        rig.event = anyio.Event()
        rig.parked.set()


class _EngineRig(_WakeRig):
    """An engine parked in ``wait_for_input`` of a running generation."""

    def __init__(self) -> None:
        super().__init__()
        self.runtime = LiveRuntime()
        self.generation_id = ""
        self.served = 0


async def _engine_task(rig: _EngineRig) -> None:
    while True:
        rig.runtime = runtime = LiveRuntime()
        async with runtime.open_generation() as gen:
            rig.generation_id = gen.id
            rig.parked.set()
            for served in range(1, ROTATE_AFTER + 1):
                await gen.wait_for_input()
                rig.woke_at = perf_counter_ns()
                await gen.boundary(_write_nothing)
                rig.served += 1
                if served < ROTATE_AFTER:
                    rig.parked.set()
        # Leaving the block and opening the next runtime has no await, so the
        # submitter only runs again once the engine is parked on the new one.


class _InboxRig(_WakeRig):
    """The manager-task baseline: submit -> memory stream -> manager -> queue + event -> engine."""

    def __init__(self) -> None:
        super().__init__()
        self.send, self.receive = anyio.create_memory_object_stream[Input](max_buffer_size=math.inf)
        self.queue: list[Input] = []


async def _inbox_manager(rig: _InboxRig) -> None:
    async with rig.receive:
        async for item in rig.receive:
            rig.queue.append(item)
            rig.event.set()


async def _inbox_engine(rig: _InboxRig) -> None:
    rig.parked.set()
    while True:
        await rig.event.wait()
        rig.woke_at = perf_counter_ns()
        rig.event = anyio.Event()
        rig.queue.clear()
        rig.parked.set()


class _Suite:
    def __init__(self, settings: Settings, samples: Samples, task_group: TaskGroup) -> None:
        self.settings = settings
        self.samples = samples
        self.tg = task_group
        self.wake = _WakeRig()
        self.engine = _EngineRig()
        self.inbox = _InboxRig()
        self.many: list[tuple[LiveRuntime, str]] = []
        self.lone: tuple[LiveRuntime, str] | None = None
        self.lone_used = 0
        self.single: tuple[LiveRuntime, Generation] | None = None
        self.single_one: tuple[LiveRuntime, Generation] | None = None
        """``boundary_single``'s rig with ``steering_mode="one-at-a-time"`` (C30)."""

    async def start(self, stack: AsyncExitStack) -> None:
        self.tg.start_soon(_event_wake_task, self.wake)
        self.tg.start_soon(_engine_task, self.engine)
        self.tg.start_soon(_inbox_manager, self.inbox)
        self.tg.start_soon(_inbox_engine, self.inbox)
        for rig in (self.wake, self.engine, self.inbox):
            await rig.parked_again()
        for _ in range(self.settings.runtimes):
            runtime = LiveRuntime()
            gen = await stack.enter_async_context(runtime.open_generation())
            stack.callback(gen.stop)  # left with steers pending, on purpose: stopped first
            self.many.append((runtime, gen.id))
        random.Random(6).shuffle(self.many)

    def probes(self) -> dict[str, Probe]:
        return {
            "checkpoint": self.checkpoint,
            "dict_admit": self.dict_admit,
            "submit": self.submit,
            "submit_1990": self.submit_1990,
            "submit_subscribed": self.submit_subscribed,
            "submit_lone": self.submit_lone,
            "submit_many": self.submit_many,
            "boundary_small": self.boundary_small,
            "boundary_large": self.boundary_large,
            "boundary_single": self.boundary_single,
            "boundary_single_one_at_a_time": self.boundary_single_one_at_a_time,
            "event_wake": self.event_wake,
            "wake_latency": self.wake_latency,
            "inbox_baseline": self.inbox_baseline,
        }

    # -- floors ---------------------------------------------------------------------------

    async def checkpoint(self, round_: int) -> None:
        checkpoint = anyio.lowlevel.checkpoint
        with no_gc():
            start = perf_counter_ns()
            for _ in range(CHECKPOINT_BATCH):
                await checkpoint()
            stop = perf_counter_ns()
        self.samples.add("checkpoint", (stop - start) / CHECKPOINT_BATCH)

    async def dict_admit(self, round_: int) -> None:
        keys = [f"key-{round_}-{i}" for i in range(DICT_BATCH)]
        generation_id = "generation"
        table: dict[str, str] = {}
        queue: list[tuple[str, str]] = []
        with no_gc():
            start = perf_counter_ns()
            for key in keys:
                table[key] = generation_id
                queue.append((key, generation_id))
            stop = perf_counter_ns()
        self.samples.add("dict_admit", (stop - start) / DICT_BATCH)

    async def event_wake(self, round_: int) -> None:
        rig = self.wake
        latencies = []
        with no_gc():
            for _ in range(self.settings.wake_samples + 1):
                start = perf_counter_ns()
                rig.event.set()
                await rig.parked_again()
                latencies.append(rig.woke_at - start)
        self.samples.add("event_wake", _wake_batch(latencies))

    async def inbox_baseline(self, round_: int) -> None:
        rig = self.inbox
        items = _inputs(f"inbox-{round_}", self.settings.wake_samples + 1)
        latencies = []
        with no_gc():
            for item in items:
                start = perf_counter_ns()
                rig.send.send_nowait(item)
                await rig.parked_again()
                latencies.append(rig.woke_at - start)
        self.samples.add("inbox_baseline", _wake_batch(latencies))

    # -- figures --------------------------------------------------------------------------

    async def submit(self, round_: int) -> None:
        runtime, gen = await _prefilled(PREFILL)
        self.samples.add("submit_queued", await _time_submits(runtime, gen.id, _NEW_INPUTS))
        _require(runtime, accepted=PREFILL + BATCH)
        # The same inputs again: identical repeats of retained (still queued) identities.
        self.samples.add("submit_repeat", await _time_submits(runtime, gen.id, _REPEATS))
        _require(runtime, accepted=PREFILL + BATCH, repeated=BATCH)
        # The same repeats without the checkpoint an awaited submit is (C8): the decision alone.
        self.samples.add("submit_repeat_nowait", _time_submits_nowait(runtime, gen.id, _REPEATS))
        _require(runtime, accepted=PREFILL + BATCH, repeated=2 * BATCH)

    async def submit_1990(self, round_: int) -> None:
        runtime, gen = await _prefilled(SCALE_PREFILL)
        self.samples.add("submit_1990", await _time_submits(runtime, gen.id, _NEW_INPUTS))
        _require(runtime, accepted=SCALE_PREFILL + BATCH)

    async def submit_subscribed(self, round_: int) -> None:
        runtime, gen = await _prefilled(PREFILL)
        subscriptions = [runtime.subscribe() for _ in range(SUBSCRIBERS)]
        self.samples.add("submit_subscribed", await _time_submits(runtime, gen.id, _NEW_INPUTS))
        _require(runtime, accepted=PREFILL + BATCH)
        for subscription in subscriptions:
            received = 0
            while subscription.receive_nowait() is not None:
                received += 1
            if received != BATCH or subscription.dropped:
                raise RuntimeError("a subscriber did not receive every event")
            subscription.close()

    async def submit_lone(self, round_: int) -> None:
        if self.lone is None or self.lone_used + BATCH > IDENTITY_CAP:
            self.lone = (LiveRuntime(), "")
            self.lone = (self.lone[0], (await _open(self.lone[0])).id)
            self.lone_used = 0
        runtime, generation_id = self.lone
        inputs = _inputs(f"lone-{round_}", BATCH)
        self.samples.add("submit_lone", await _time_submits(runtime, generation_id, inputs))
        self.lone_used += BATCH
        _require(runtime, accepted=self.lone_used)

    async def submit_many(self, round_: int) -> None:
        runtime, generation_id = self.many[round_ % len(self.many)]
        before = runtime.statistics().accepted
        inputs = _inputs(f"many-{round_}", BATCH)
        self.samples.add("submit_many", await _time_submits(runtime, generation_id, inputs))
        _require(runtime, accepted=before + BATCH)

    async def _boundary(self, size: int) -> tuple[int, int]:
        """Wall-clock and CPU ns of one boundary draining ``size`` pending inputs (writer does nothing)."""
        _runtime, gen = await _prefilled(size)
        with no_gc():
            start, start_cpu = perf_counter_ns(), thread_time_ns()
            applied = await gen.boundary(_write_nothing)
            stop_cpu, stop = thread_time_ns(), perf_counter_ns()
        if len(applied) != size:
            raise RuntimeError("the boundary did not apply the whole batch")
        return stop - start, stop_cpu - start_cpu

    async def boundary_small(self, round_: int) -> None:
        wall, cpu = await self._boundary(BOUNDARY_SMALL)
        self.samples.add("boundary_small", wall)
        self.samples.add("boundary_small_cpu", cpu)

    async def boundary_large(self, round_: int) -> None:
        # Only its CPU time is used: a 1,000 batch runs ten times longer than a 100
        # batch, so on a shared machine it is ten times likelier to be preempted, and
        # wall-clock medians would charge the other processes' time to it.
        _wall, cpu = await self._boundary(BOUNDARY_LARGE)
        self.samples.add("boundary_large_cpu", cpu)

    async def boundary_single(self, round_: int) -> None:
        # The engine's usual boundary: one input pending (admitted untimed just before),
        # drained by a writer that does nothing: its fixed cost, not a per-input share.
        # The first of the batch is untimed (as the submit figures' WARM_UP).
        spent = 0 if self.single is None else self.single[0].statistics().identities
        if self.single is None or spent > IDENTITY_CAP - 2 * BOUNDARY_SINGLES:
            self.single = await _prefilled(0)
        mean, first = await _single_boundaries(*self.single, f"single-{round_}")
        self.samples.add("boundary_single", mean)
        self.samples.add("boundary_single_first_ten", first)

    async def boundary_single_one_at_a_time(self, round_: int) -> None:
        # The same, in ``steering_mode="one-at-a-time"`` (C30): the boundary counts what it writes.
        rig = self.single_one
        spent = 0 if rig is None else rig[0].statistics().identities
        if rig is None or spent > IDENTITY_CAP - 2 * BOUNDARY_SINGLES:
            rig = self.single_one = await _prefilled(0, steering_mode="one-at-a-time")
        mean, first = await _single_boundaries(*rig, f"one-{round_}")
        self.samples.add("boundary_single_one_at_a_time", mean)
        self.samples.add("boundary_single_one_at_a_time_first_ten", first)

    async def wake_latency(self, round_: int) -> None:
        rig = self.engine
        items = _inputs(f"wake-{round_}", self.settings.wake_samples + 1)
        latencies = []
        with no_gc():
            for item in items:
                served = rig.served
                start = perf_counter_ns()
                receipt = await rig.runtime.submit_steering(item, rig.generation_id)
                await rig.parked_again()
                latencies.append(rig.woke_at - start)
                if not receipt.accepted or rig.served != served + 1:
                    raise RuntimeError(f"wake_latency took the wrong path: {receipt}")
        self.samples.add("wake_latency", _wake_batch(latencies))

    # -- memory (traced once, after the timed rounds) ------------------------------------

    async def runtime_memory(self) -> float:
        """Traced bytes per idle runtime with an open generation (entered, no engine parked)."""
        count = self.settings.memory_runtimes
        runtimes: list[LiveRuntime] = []
        runtimes.extend(LiveRuntime() for _ in range(2))  # the list's first growth, outside the trace
        runtimes.clear()
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(count):
                runtime = LiveRuntime()
                await _open(runtime)
                runtimes.append(runtime)
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        return (after - before) / count

    async def identity_memory(self) -> float:
        """Traced bytes per retained identity at the 2,000 cap, 200-character texts, beyond the texts."""
        runtime = LiveRuntime()
        generation_id = (await _open(runtime)).id
        text_bytes = 0
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(IDENTITY_CAP):
                text = f"{i:08d} " + "x" * (IDENTITY_TEXT_CHARS - 9)
                text_bytes += sys.getsizeof(text)
                receipt = runtime.submit_steering_nowait(Input("steer", text, id=f"steer-{i}"), generation_id)
                if not receipt.accepted:
                    raise RuntimeError("an identity below the cap was refused")
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        if runtime.statistics().identities != IDENTITY_CAP:
            raise RuntimeError("the runtime does not hold the cap of identities")
        return (after - before - text_bytes) / IDENTITY_CAP


async def _single_boundaries(runtime: LiveRuntime, gen: Generation, prefix: str) -> tuple[float, float]:
    """The mean time of ``BOUNDARY_SINGLES`` one-input boundaries (after one untimed), and that
    of the first ``FIRST_TEN`` of them, in ns."""
    total = first = 0
    for n in range(BOUNDARY_SINGLES + 1):
        item = Input("steer", STEER_TEXT, id=f"{prefix}-{n}")
        if not runtime.submit_steering_nowait(item, gen.id).accepted:
            raise RuntimeError("a boundary_single input was refused")
        with no_gc():
            start = perf_counter_ns()
            applied = await gen.boundary(_write_nothing)
            stop = perf_counter_ns()
        if len(applied) != 1:
            raise RuntimeError("the boundary did not apply its one input")
        if n:
            total += stop - start
            if n <= FIRST_TEN:
                first = total
    return total / BOUNDARY_SINGLES, first / min(FIRST_TEN, BOUNDARY_SINGLES)


def _with_first_ten(fig: Figure, samples: Samples) -> Figure:
    """``fig`` with ``first_ten``: the median over rounds of its batches' first ten boundaries (ns),
    reported beside the figure, not held to its target (``BOUNDARY_SINGLES``)."""
    fig["first_ten"] = round(samples.median(f"{fig['name']}_first_ten"), 1)
    return fig


def _figures(backend: str, samples: Samples, runtime_bytes: float, identity_bytes: float) -> list[Figure]:
    median = samples.median
    queued = median("submit_queued")
    wake = median("wake_latency")
    empty_dict = sys.getsizeof({})
    floor_admit = median("checkpoint") + median("dict_admit")
    return [
        figure("submit_queued", backend, "ns", queued, floor_admit, 2.0),
        # An awaited repeat is a checkpoint (C8, issue 11): at most an admission's cost; the
        # _nowait form is the decision alone.
        figure("submit_repeat", backend, "ns", median("submit_repeat"), queued, 1.0),
        figure("submit_repeat_nowait", backend, "ns", median("submit_repeat_nowait"), queued, 0.5),
        figure("identity_scale", backend, "ns", median("submit_1990"), queued, 1.3),
        figure("wake_latency", backend, "ns", wake, median("event_wake"), 1.5),
        figure("wake_vs_inbox", backend, "ns", wake, median("inbox_baseline"), 0.8),
        figure("boundary_per_input", backend, "ns", median("boundary_small") / BOUNDARY_SMALL, queued, 1.0),
        figure(
            "boundary_linearity",
            backend,
            "ns",
            median("boundary_large_cpu"),
            median("boundary_small_cpu") * (BOUNDARY_LARGE // BOUNDARY_SMALL),
            1.2,
        ),
        # issue 25: 1.35 (1.5 before): the boundary's fixed cost, with room on a busy machine
        _with_first_ten(
            figure("boundary_single", backend, "ns", median("boundary_single"), floor_admit, 1.35), samples
        ),
        # C30: one-at-a-time within boundary_single's target of issue 22 (1.5)
        _with_first_ten(
            figure(
                "boundary_single_one_at_a_time",
                backend,
                "ns",
                median("boundary_single_one_at_a_time"),
                floor_admit,
                1.5,
            ),
            samples,
        ),
        figure("runtimes_scale", backend, "ns", median("submit_many"), median("submit_lone"), 1.3),
        figure("runtime_memory", backend, "bytes", runtime_bytes, empty_dict, 8_192),
        figure("identity_memory", backend, "bytes", identity_bytes, empty_dict, 1_024),
        figure("event_overhead", backend, "ns", median("submit_subscribed"), queued, 1.5),
    ]


FLOORS = ("checkpoint", "dict_admit", "event_wake", "inbox_baseline")


async def _run(settings: Settings, backend: str) -> tuple[list[Figure], dict[str, float]]:
    samples = Samples()
    order = random.Random(6)
    async with AsyncExitStack() as stack, anyio.create_task_group() as tg:
        suite = _Suite(settings, samples, tg)
        await suite.start(stack)
        probes = suite.probes()
        gc.collect()
        gc.freeze()  # the long-lived rigs and runtimes are not rescanned by every collection
        try:
            for round_ in range(settings.rounds):
                names = list(probes)
                order.shuffle(names)
                for name in names:
                    await probes[name](round_)
            runtime_bytes = await suite.runtime_memory()
            identity_bytes = await suite.identity_memory()
        finally:
            gc.unfreeze()
            suite.inbox.send.close()
            tg.cancel_scope.cancel()
    floors = {name: samples.median(name) for name in FLOORS}
    return _figures(backend, samples, runtime_bytes, identity_bytes), floors


def run_backend(backend: str, settings: Settings) -> tuple[list[Figure], dict[str, float]]:
    """Measure every floor and figure on ``backend``; returns the figures and the four floors (ns)."""
    return anyio.run(_run, settings, backend, backend=backend)
