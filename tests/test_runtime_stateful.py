"""Stateful Hypothesis programs against a real ``LiveRuntime`` driven by the reference loop.

Each example is one ``anyio.run`` on the chosen backend. The reference ``AgentLoop``
runs on fixtures whose every await (provider call, tool call, context write before
and after its effect, durable checkpoint) parks until the program acts. Hypothesis
chooses each step: start a generation, submit a new steer (current or stale anchor),
repeat one, send a conflicting repeat, a concurrent burst, release the parked
await (choosing the model's tool calls), make it raise (an interrupted write when
parked in the writer), cancel the generation there, stop it, race a release against
a submit, or close the runtime. After every step the program checks
``runtime._check()`` and compares every receipt with an independent model
(``Model``) of CONTRACT.md; at the end of each example the whole recorded history
goes through ``check_history``.

Interleavings are chosen by Hypothesis, deterministically, so failures shrink:

* every race is written out: the program decides the order in which a gate is
  released and submitters are started, then lets the tasks run to quiescence with
  ``anyio.wait_all_tasks_blocked()``;
* on trio, Hypothesis also drives the scheduler itself. Under Hypothesis trio
  sorts each batch of runnable tasks and shuffles it with ``trio._core._run._r``
  (its ``_ALLOW_DETERMINISTIC_SCHEDULING`` mode). For the duration of an example
  we replace that ``Random`` with ``DrawnShuffle``, whose ``shuffle`` draws each
  swap from the example's data: the task order of every batch is a Hypothesis
  choice, replayed exactly and shrunk towards "no swap". (trio has no public hook
  for this; the private name is checked at import so a trio upgrade fails loudly.)
* asyncio's scheduler is FIFO, so the explicit orders above are its interleavings.

Follow-ups and delivery modes (C29, C30): each example draws the runtime's
``steering_mode`` and ``follow_up_mode``; a submission is a steer or a follow-up (a
conflicting repeat may change the kind). The model keeps follow-ups aside while their
anchor runs, carries them when it finishes (the next generation the program starts
writes them first), and holds them with the ending's reason otherwise; a boundary
never writes two inputs of a one-at-a-time kind (the provider call separates two
boundaries: the program marks it for the history checker, which is told the modes).
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
from collections.abc import Mapping, MutableSequence, Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
import pytest
import trio._core._run as trio_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from live_steering import Disposition, Input, LiveRuntime, Receipt
from live_steering.loop import AgentLoop, Context, ContextEntry, Reply, ToolCall
from live_steering.testing import History

LIMIT = 6  # small, so the identity cap fills inside an example
BUDGET = 4  # provider calls per generation, so budget exhaustion happens too
FAST_EXAMPLES = int(os.environ.get("LIVE_STEERING_STATEFUL_EXAMPLES", "200"))
MODES = ("all", "one-at-a-time")
SLOW_EXAMPLES = 5_000
MAX_STEPS = 40

#: Figures of the run, per backend: examples, steps, actions, scheduler draws.
FIGURES: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)

#: The trio half of these programs swaps trio's private scheduler Random; if a trio release
#: moves it, those tests skip with this reason instead of breaking the whole file.
TRIO_SCHEDULER_HOOK = isinstance(getattr(trio_run, "_r", None), random.Random)


class DrawnShuffle(random.Random):
    """trio's batch shuffle, with every swap taken from a list Hypothesis drew for the example.

    The choices are drawn before the run (a draw must never raise inside trio's run
    loop). Choice ``c`` at position ``i`` swaps element ``i`` with ``i - c % (i + 1)``,
    so zeros, and an exhausted list, mean "no swap": shrinking goes towards trio's
    deterministic counter order.
    """

    def __init__(self, choices: Sequence[int], figures: collections.Counter[str]) -> None:
        super().__init__(0)
        self._choices = iter(choices)
        self._figures = figures

    def shuffle(self, x: MutableSequence[Any]) -> None:
        for i in range(len(x) - 1, 0, -1):
            choice = next(self._choices, 0)
            if choice:
                j = i - choice % (i + 1)
                x[i], x[j] = x[j], x[i]
                self._figures["scheduler swaps"] += 1
            self._figures["scheduler decisions"] += 1


async def quiesce() -> None:
    """Run every task until all are blocked.

    A few plain checkpoints first: anyio's asyncio ``wait_all_tasks_blocked`` sleeps
    0.1 s whenever a task is still runnable, so letting them settle first keeps the
    examples fast. The order is still the scheduler's (and on trio, Hypothesis's).
    """
    for _ in range(4):
        await anyio.lowlevel.checkpoint()
    await anyio.wait_all_tasks_blocked()


class Injected(Exception):
    """The failure injected at a parked await (a provider, tool, writer or checkpoint error)."""


@attrs.define
class Parked:
    name: str
    release: anyio.Event
    fail: bool = False
    tool_calls: int = 0


class Driver:
    """Every await of the loop's fixtures parks here until the program releases it."""

    def __init__(self) -> None:
        self.parked: Parked | None = None

    async def park(self, name: str) -> Parked:
        parked = Parked(name, anyio.Event())
        self.parked = parked
        try:
            await parked.release.wait()
        finally:
            if self.parked is parked:
                self.parked = None
        if parked.fail:
            raise Injected(name)
        return parked


class Provider:
    def __init__(self, driver: Driver, history: History, written: collections.Counter[str]) -> None:
        self.driver = driver
        self.calls = 0
        self.history = history
        self.written = written

    async def complete(self, request: Sequence[ContextEntry]) -> Reply:
        self.calls += 1
        # between two boundaries of the reference loop (C30): the history checker counts per boundary
        self.history.mark_boundary()
        self.written.clear()
        parked = await self.driver.park("provider")
        return Reply("r", tuple(ToolCall(f"t{n}", "tool") for n in range(parked.tool_calls)))


class Tools:
    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    async def run(self, call: ToolCall) -> str:
        await self.driver.park("tool")
        return "ok"


class ParkingContext(Context):
    def __init__(self, driver: Driver) -> None:
        super().__init__()
        self.driver = driver

    async def add_steer(self, input: Input, metadata: Mapping[str, Any]) -> None:
        await self.driver.park(f"write-before:{input.id}")
        self.add("steer", input.text, metadata)
        await self.driver.park(f"write-after:{input.id}")


@attrs.define
class ModelInput:
    text: str
    anchor: str
    disposition: Disposition = Disposition.QUEUED
    reason: str | None = None
    kind: str = "steer"
    target: str | None = None
    """A follow-up's: the generation it was carried into (C29)."""

    def receipt(self, input_id: str) -> Receipt:
        return Receipt(True, input_id, self.anchor, self.disposition, self.reason)


@attrs.define
class Model:
    """What CONTRACT.md says the runtime's state is, computed without looking at the runtime."""

    inputs: dict[str, ModelInput] = attrs.Factory(dict)
    gen_id: str | None = None
    open: bool = False
    pending: list[str] = attrs.Factory(list)
    follow_ups: list[str] = attrs.Factory(list)
    """Follow-ups anchored to the running generation, for after it (C29)."""
    carried: list[str] = attrs.Factory(list)
    """Follow-ups of the generation that finished last, for the next one."""
    writing: str | None = None
    announcing: str | None = None
    """The input the write barrier is announcing: queued, no longer pending, not handed over."""
    end_reason: str | None = None
    """Why admission closed early (stop or close): the hold reason of an input the barrier returns."""
    closed: bool = False
    used_generations: list[str] = attrs.Factory(list)

    def expect(self, input: Input, anchor: str) -> Receipt:
        """The receipt the contract requires for this submission now (C6-C12)."""
        known = self.inputs.get(input.id)
        same = (
            known is not None
            and known.text == input.text
            and known.kind == input.kind
            and known.anchor == anchor
        )
        if self.closed and not same:
            return Receipt(False, input.id, anchor, None, "closed")  # a repeat still answers (C1, C10)
        if known is not None:
            if same:
                return known.receipt(input.id)
            return Receipt(False, input.id, anchor, None, "identity-conflict")
        if self.gen_id is None or anchor != self.gen_id:
            return Receipt(False, input.id, anchor, None, "stale-generation")
        if not self.open:
            return Receipt(False, input.id, anchor, None, "finishing")
        if len(self.inputs) >= LIMIT:
            return Receipt(False, input.id, anchor, None, "capacity")
        return Receipt(True, input.id, anchor, Disposition.QUEUED)

    def apply(self, input: Input, anchor: str, receipt: Receipt) -> None:
        if receipt.accepted and input.id not in self.inputs:
            self.inputs[input.id] = ModelInput(input.text, anchor, kind=input.kind)
            # C29: a follow-up waits for the end of its anchor, a steer for the next boundary
            (self.follow_ups if input.kind == "follow_up" else self.pending).append(input.id)

    def hold_pending(self, reason: str) -> None:
        """Admission closed for ``reason``: the pending inputs and the follow-ups are held (C17, C29)."""
        self.hold(self.pending, reason)
        self.hold(self.follow_ups, reason)

    def hold(self, ids: list[str], reason: str) -> None:
        for input_id in ids:
            self.inputs[input_id].disposition = Disposition.HELD
            self.inputs[input_id].reason = reason
        ids.clear()


class Program:
    """One example: the runtime, the loop, the model, and the steps Hypothesis chooses."""

    def __init__(self, data: st.DataObject, backend: str) -> None:
        self.data = data
        self.figures = FIGURES[backend]
        self.modes = {
            "steer": self.draw(st.sampled_from(MODES), "steering_mode"),
            "follow_up": self.draw(st.sampled_from(MODES), "follow_up_mode"),
        }
        self.figures[f"modes {self.modes['steer']}/{self.modes['follow_up']}"] += 1
        self.runtime = LiveRuntime(
            session_id="stateful",
            identity_limit=LIMIT,
            steering_mode=self.modes["steer"],
            follow_up_mode=self.modes["follow_up"],
        )
        self.history = History.attach(self.runtime)
        self.written: collections.Counter[str] = collections.Counter()
        """Inputs of each kind written since the last provider call: in the running boundary (C30)."""
        self.model = Model()
        self.driver = Driver()
        self.tg: anyio.abc.TaskGroup | None = None
        self.loop: AgentLoop | None = None
        self.loop_scope: anyio.CancelScope | None = None
        self.loop_running = False
        self.provider: Provider | None = None
        self.context: ParkingContext | None = None
        self.ending: str | None = None  # what the program did to end the generation
        self.generations = 0
        self.next_id = 0
        if self.draw(st.booleans(), "write barrier"):
            # a write-ahead hook (as the receipt journal installs) parks before each batch
            self.runtime.set_write_barrier(self._barrier)
            self.figures["examples with a write barrier"] += 1

    async def _barrier(self, generation_id: str, inputs: Sequence[Input]) -> None:
        await self.driver.park("barrier")

    def draw(self, strategy: st.SearchStrategy[Any], label: str) -> Any:
        return self.data.draw(strategy, label=label)

    # -- the engine ---------------------------------------------------------------------------

    async def _run_loop(self, loop: AgentLoop, gen_id: str) -> None:
        with anyio.CancelScope() as scope:
            self.loop_scope = scope
            with contextlib.suppress(Injected):
                await loop.run("task", generation_id=gen_id)
        self.loop_running = False

    async def start(self) -> None:
        assert self.tg is not None
        self.generations += 1
        gen_id = f"gen-{self.generations}"
        self.provider = Provider(self.driver, self.history, self.written)
        self.context = ParkingContext(self.driver)
        self.loop = AgentLoop(
            self.runtime,
            self.provider,
            Tools(self.driver),
            context=self.context,
            call_budget=BUDGET,
            checkpoint=self._checkpoint,
            run_follow_ups=False,  # the program starts the next generation itself (the model's)
        )
        self.loop_running = True
        self.ending = None
        self.tg.start_soon(self._run_loop, self.loop, gen_id)
        self.model.gen_id, self.model.open, self.model.end_reason = gen_id, True, None
        self.model.used_generations.append(gen_id)
        # C29: the follow-ups of the generation that finished are this one's first inputs
        for input_id in self.model.carried:
            self.model.inputs[input_id].target = gen_id
            self.figures["follow-ups carried"] += 1
        self.model.pending = [*self.model.carried, *self.model.pending]
        self.model.carried = []
        self.written.clear()

    async def _checkpoint(self, context: Context) -> None:
        await self.driver.park("checkpoint")

    # -- observation ----------------------------------------------------------------------------

    async def settle(self) -> None:
        """Let every task run until all are blocked, then fold what the loop did into the model."""
        await quiesce()
        model = self.model
        parked = self.driver.parked
        if parked is not None and parked.name == "barrier" and model.announcing is None:
            # the write-ahead hook runs for the oldest pending input before it is handed over
            assert model.pending, "write barrier with nothing pending"
            model.announcing = model.pending.pop(0)
            self.figures["write barrier parks"] += 1
        if parked is not None and parked.name.startswith("write-before:"):
            input_id = parked.name.split(":", 1)[1]
            if model.writing is None:
                if model.announcing == input_id:
                    model.announcing = None
                else:
                    # C13: the boundary hands over the oldest pending input
                    assert model.pending, f"writing {input_id} with nothing pending"
                    assert input_id == model.pending[0], f"wrote {input_id}, oldest is {model.pending[0]}"
                    model.pending.pop(0)
                model.writing = input_id
                # C30: a boundary writes at most one input of a one-at-a-time kind
                known = model.inputs[input_id]
                kind = "steer" if known.target is None else "follow_up"
                self.written[kind] += 1
                if self.modes[kind] == "one-at-a-time":
                    assert self.written[kind] == 1, f"two {kind}s in one boundary ({input_id})"
                    self.figures[f"one-at-a-time {kind} writes"] += 1
                if known.target is not None:
                    self.figures["follow-up writes"] += 1
            assert model.writing == input_id
        if not self.loop_running and model.gen_id is not None:
            self.generation_ended()
        self.check()

    def generation_ended(self) -> None:
        model = self.model
        terminal = next(e for e in reversed(self.history.events) if "accepted_input_ids" in e)
        assert terminal["generation_id"] == model.gen_id
        kind = terminal["type"]
        if self.ending == "cancel":
            assert kind == "generation.cancelled", kind
            reason = "generation-cancelled"
        elif self.ending == "fail":
            assert kind == "generation.failed", kind
            reason = "generation-failed"
        else:
            assert kind in ("generation.finished", "generation.stopped"), kind
            reason = ""
        if model.announcing is not None:
            # never handed to the writer: held, never unknown (C15), with the reason admission closed
            announced_reason = model.end_reason or reason
            assert announced_reason, f"{kind}: {model.announcing} returned by the barrier without a reason"
            self.model.inputs[model.announcing].disposition = Disposition.HELD
            self.model.inputs[model.announcing].reason = announced_reason
            model.announcing = None
        if model.writing is not None:
            # only a cancel or a failure can interrupt a write (stop never does): unknown (C15)
            assert self.ending in ("cancel", "fail"), f"write of {model.writing} left unconfirmed"
            self.model.inputs[model.writing].disposition = Disposition.UNKNOWN
            self.model.inputs[model.writing].reason = "write-interrupted"
            model.writing = None
        if kind == "generation.finished":
            # C16: a normal finish happens only with nothing pending: never accepted-then-stranded
            assert not model.pending, f"finished with {model.pending} pending"
        if kind == "generation.stopped" and self.ending is None and not model.closed:
            # nobody stopped it: the call budget did (C17)
            assert terminal["reason"] == "budget-exhausted"
            assert self.provider is not None
            assert self.provider.calls == BUDGET
            reason = "budget-exhausted"
        if model.pending:
            assert reason, f"{kind}: pending {model.pending} without a reason"
            model.hold(model.pending, reason)
        if model.follow_ups and kind == "generation.finished":
            # C29: carried into the next generation (a close would have held them)
            assert not model.closed
            model.carried, model.follow_ups = model.follow_ups, []
        elif model.follow_ups:
            assert reason, f"{kind}: follow-ups {model.follow_ups} without a reason"
            model.hold(model.follow_ups, reason)
            self.figures[f"follow-ups held {reason}"] += 1
        model.gen_id, model.open = None, False
        self.figures[f"ended {kind}"] += 1

    def check(self) -> None:
        """The invariants after every step: core _check, and every receipt equals the model's."""
        self.runtime._check()
        stats = self.runtime.statistics()
        assert stats.identities == len(self.model.inputs) <= LIMIT
        for input_id, expected in self.model.inputs.items():
            assert self.runtime.receipt(input_id) == expected.receipt(input_id), input_id
        generation = self.runtime.generation
        if self.model.gen_id is None:
            assert generation is None
        else:
            assert generation is not None
            assert generation["id"] == self.model.gen_id
            assert generation["pending"] == len(self.model.pending)
            assert (generation["steering_mode"], generation["follow_up_mode"]) == (
                self.modes["steer"],
                self.modes["follow_up"],
            )
        assert self.runtime.pending_follow_ups == len(self.model.follow_ups) + len(self.model.carried)
        assert stats.follow_ups == self.runtime.pending_follow_ups

    # -- host actions -------------------------------------------------------------------------

    def new_input(self) -> Input:
        self.next_id += 1
        kind = self.draw(st.sampled_from(["steer", "steer", "follow_up"]), "kind")
        return Input(kind, f"{kind} {self.next_id}", id=f"in-{self.next_id}")

    def anchor(self) -> str:
        choices = [*self.model.used_generations, "gen-never"]
        if self.model.gen_id is not None:
            choices += [self.model.gen_id] * 3
        return str(self.draw(st.sampled_from(choices), "anchor"))

    async def submit(self, input: Input, anchor: str) -> None:
        expected = self.model.expect(input, anchor)
        receipt = await self.history.submit(input, anchor)
        assert receipt == expected, (receipt, expected)
        self.model.apply(input, anchor, receipt)
        self.figures["submits"] += 1

    def existing(self) -> tuple[str, ModelInput]:
        input_id = self.draw(st.sampled_from(sorted(self.model.inputs)), "existing id")
        return input_id, self.model.inputs[input_id]

    async def burst(self) -> None:
        """Several submitters at once (new ids, repeats, conflicts): decided in arrival order (C12)."""
        assert self.tg is not None
        count = self.draw(st.integers(2, 5), "burst size")
        submissions: list[tuple[Input, str]] = []
        for _ in range(count):
            if self.model.inputs and self.draw(st.booleans(), "burst repeat"):
                input_id, known = self.existing()
                submissions.append((Input(known.kind, known.text, id=input_id), known.anchor))
            else:
                submissions.append((self.new_input(), self.anchor()))
        first = len(self.history.operations)
        async with anyio.create_task_group() as burst:
            for input, anchor in submissions:
                burst.start_soon(self.history.submit, input, anchor)
        # replay the decisions in the order they were taken (invocation order; admission is synchronous)
        for op in self.history.operations[first:]:
            assert isinstance(op.input, Input)
            assert isinstance(op.generation_id, str)
            assert op.receipt == self.model.expect(op.input, op.generation_id), op
            self.model.apply(op.input, op.generation_id, op.receipt)
        self.figures["submits"] += count

    # -- engine actions -------------------------------------------------------------------------

    def release(self, parked: Parked) -> None:
        if parked.name == "provider":
            parked.tool_calls = self.draw(st.integers(0, 2), "tool calls")
        if parked.name.startswith("write-after:"):
            input_id = self.model.writing
            assert input_id is not None
            self.model.inputs[input_id].disposition = Disposition.APPLIED
            self.model.writing = None
        parked.release.set()

    async def race(self, parked: Parked) -> None:
        """Release the parked await and submit concurrently, in an order Hypothesis picks."""
        assert self.tg is not None
        input, anchor = self.new_input(), self.anchor()
        before = self.model.expect(input, anchor)
        results: list[Receipt] = []

        async def submitter() -> None:
            results.append(await self.history.submit(input, anchor))

        submit_first = self.draw(st.booleans(), "submit first")
        if submit_first:
            self.tg.start_soon(submitter)
        model_writing = self.model.writing
        self.release(parked)
        if not submit_first:
            self.tg.start_soon(submitter)
        await quiesce()
        (receipt,) = results
        if receipt == before:
            # decided before the loop moved on
            self.model.apply(input, anchor, receipt)
            await self.settle()
        else:
            await self.settle()
            after = self.model.expect(input, anchor)
            assert receipt == after, (receipt, before, after, parked.name, model_writing)
            self.model.apply(input, anchor, receipt)
        self.figures["races"] += 1
        self.figures["submits"] += 1

    # -- the program ----------------------------------------------------------------------------

    def enabled(self) -> list[str]:
        actions = ["submit", "burst"]
        if self.model.inputs:
            actions += ["repeat", "conflict"]
        if not self.loop_running and not self.model.closed:
            actions += ["start"] * 3
        if self.driver.parked is not None:
            actions += ["release"] * 8 + ["race"] * 3 + ["fail", "cancel", "stop"]
            if self.driver.parked.name == "barrier":
                # a disturbance inside the write barrier is rare otherwise and has its own rule (C15)
                actions += ["fail", "cancel", "stop"]
        if not self.model.closed and self.generations:
            actions += ["close"]
        return actions

    async def step(self) -> None:
        action = self.draw(st.sampled_from(self.enabled()), "action")
        self.figures[f"action {action}"] += 1
        self.figures["steps"] += 1
        parked = self.driver.parked
        if action == "start":
            await self.start()
        elif action == "submit":
            await self.submit(self.new_input(), self.anchor())
        elif action == "repeat":
            input_id, known = self.existing()
            await self.submit(Input(known.kind, known.text, id=input_id), known.anchor)
            self.figures["repeats"] += 1
        elif action == "conflict":
            input_id, known = self.existing()
            change = self.draw(st.sampled_from(["text", "anchor", "kind"]), "conflict in")
            if change == "text":
                await self.submit(Input(known.kind, known.text + " (changed)", id=input_id), known.anchor)
            elif change == "kind":  # a steer and a follow-up of one id and text conflict (C10, C29)
                other_kind = "steer" if known.kind == "follow_up" else "follow_up"
                await self.submit(Input(other_kind, known.text, id=input_id), known.anchor)
            else:
                other = self.anchor()
                await self.submit(Input(known.kind, known.text, id=input_id), other)
        elif action == "burst":
            await self.burst()
        elif action == "close":
            await self.runtime.aclose()
            self.model.closed = True
            if self.model.gen_id is not None and self.model.open:  # a closing one keeps its reason
                self.model.open = False
                self.model.end_reason = "runtime-closed"
                self.model.hold_pending("runtime-closed")
            # C29: follow-ups not yet carried never will be (a finishing generation's, the last one's)
            self.model.hold(self.model.follow_ups, "runtime-closed")
            self.model.hold(self.model.carried, "runtime-closed")
            self.check()
        elif action == "race":
            assert parked is not None
            await self.race(parked)
            return
        else:
            assert parked is not None
            if action == "release":
                self.release(parked)
            elif action == "fail":
                parked.fail = True
                self.ending = "fail"
                parked.release.set()
            elif action == "cancel":
                assert self.loop_scope is not None
                self.ending = "cancel"
                self.loop_scope.cancel()
            elif action == "stop":
                assert self.loop is not None
                self.loop.stop()
                if self.model.open:
                    self.model.open = False
                    self.ending = "stop"
                    self.model.end_reason = "generation-stopped"
                    self.model.hold_pending("generation-stopped")
                self.check()  # C17: held synchronously, in the stop call
        await self.settle()

    async def finish(self) -> None:
        """Drive the running generation to its end (releasing with no tool calls), and the ones that
        carry its follow-ups (C29), then check it all."""
        while self.loop_running or (self.model.carried and not self.model.closed):
            if not self.loop_running:
                await self.start()
                await self.settle()
                continue
            parked = self.driver.parked
            assert parked is not None, "the loop is blocked outside a parked await"
            if parked.name == "provider":
                parked.tool_calls = 0
                parked.release.set()
            else:
                self.release(parked)
            await self.settle()
        await self.settle()
        assert not self.model.pending
        assert self.model.writing is None
        for input_id in self.model.inputs:
            receipt = self.runtime.receipt(input_id)
            assert receipt is not None
            assert receipt.disposition is not Disposition.QUEUED
        self.history.check(require_final=True).assert_ok()
        await self.runtime.aclose()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            self.tg = tg
            steps = self.draw(st.integers(1, MAX_STEPS), "steps")
            for _ in range(steps):
                await self.step()
            await self.finish()
        self.figures["examples"] += 1


def run_example(data: st.DataObject, backend: str) -> None:
    program = Program(data, backend)
    if backend == "trio":
        if not TRIO_SCHEDULER_HOOK:
            pytest.skip("trio's private scheduler Random (trio._core._run._r) moved; update DrawnShuffle")
        assert trio_run._ALLOW_DETERMINISTIC_SCHEDULING, "trio's Hypothesis plugin is not active"
        saved = trio_run._r
        choices = data.draw(st.lists(st.integers(0, 7), max_size=300), label="trio shuffle")
        trio_run._r = DrawnShuffle(choices, FIGURES[backend])
        try:
            run_unwrapped(program, "trio")
        finally:
            trio_run._r = saved
    else:
        run_unwrapped(program, "asyncio")


def run_unwrapped(program: Program, backend: str) -> None:
    """``anyio.run``, re-raising a lone exception out of its task-group wrapper.

    Hypothesis must see its own control-flow exceptions (and a failing assertion)
    unwrapped to replay and shrink the example.
    """
    try:
        anyio.run(program.run, backend=backend)
    except BaseExceptionGroup as group:
        leaves = list(_leaves(group))
        if len(leaves) == 1:
            raise leaves[0] from group
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


HEALTH = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=FAST_EXAMPLES, deadline=None, suppress_health_check=HEALTH)
@given(data=st.data())
def test_runtime_and_reference_loop_keep_the_contract(backend: str, data: st.DataObject) -> None:
    """Random programs of submits, repeats, conflicts, bursts, tool rounds, stops, cancels and failures."""
    run_example(data, backend)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=SLOW_EXAMPLES, deadline=None, suppress_health_check=HEALTH)
@given(data=st.data())
def test_runtime_and_reference_loop_keep_the_contract_long(backend: str, data: st.DataObject) -> None:
    """The same programs, many more examples: the run behind docs/reliability.md's figures."""
    run_example(data, backend)
    if os.environ.get("LIVE_STEERING_FIGURES"):
        with open(os.path.join(os.environ["LIVE_STEERING_FIGURES"], "stateful.txt"), "w") as out:
            for name, counter in sorted(FIGURES.items()):
                out.write(f"{name}: {dict(sorted(counter.items()))}\n")
