"""A host stops a generation by id through the fleet (issue 15 item 3): both stores, both backends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from fleet_helpers import FleetStore, new_session
from live_steering import Disposition, Input, LiveRuntime, Receipt, StopReason
from live_steering.fleet import NO_OWNER, NOT_RUNNING, UNREACHABLE, StopResult
from live_steering.loop import AgentLoop, ContextEntry, FunctionTools, LoopOutcome, Reply, ToolCall

#: These tests leave generations with steers pending on purpose, to see them held by a stop;
#: the library's warning for a forgotten checkpoint decision is not their subject.
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::live_steering.CheckpointDecisionWarning"),
]


class _OneToolCall:
    """A provider whose first reply calls the ``work`` tool; any later call would finish."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: Sequence[ContextEntry]) -> Reply:
        self.calls += 1
        if self.calls == 1:
            return Reply("working", [ToolCall("c1", "work")])
        return Reply("done")


async def test_remote_stop_while_a_tool_runs_ends_the_loop_stopped(fleet_store: FleetStore) -> None:
    """A stop from another node while a tool runs: the loop ends stopped, the pending steer is held."""
    session = new_session()
    tool_running, tool_may_finish = anyio.Event(), anyio.Event()

    async def work() -> str:
        tool_running.set()
        await tool_may_finish.wait()
        return "worked"

    provider = _OneToolCall()
    events: list[dict[str, Any]] = []
    async with fleet_store.fleet("owner") as owner, fleet_store.fleet("host") as host:
        async with owner.own(LiveRuntime(session_id=session)) as runtime:
            runtime.add_listener(events.append)
            loop = AgentLoop(runtime, provider, FunctionTools({"work": work}))
            results = []

            async def run_loop() -> None:
                results.append(await loop.run("go", generation_id="g1"))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run_loop)
                await tool_running.wait()
                await owner.flush(session)
                assert await host.generation(session) == {"id": "g1", "steering_mode": "all"}
                queued = await host.submit(session, Input("steer", "Use X", id="m-1"), "g1")
                assert queued.disposition is Disposition.QUEUED
                result = await host.stop(session, "g1")
                assert result == StopResult(True, session, "g1", None)
                held = Receipt(True, "m-1", "g1", Disposition.HELD, "generation-stopped")
                assert runtime.receipt("m-1") == held  # held at once, while the tool still runs
                tool_may_finish.set()
            (outcome,) = results
            assert outcome.outcome is LoopOutcome.STOPPED
            assert (outcome.provider_calls, outcome.held_input_ids) == (1, ("m-1",))
            assert provider.calls == 1  # the tool's round ended the loop: no further model call
            (stopped,) = [e for e in events if e["type"] == "generation.stopped"]
            assert (stopped["generation_id"], stopped["reason"]) == ("g1", "generation-stopped")
            final = await host.wait_final(session, "m-1")
            assert (final.disposition, final.reason) == (Disposition.HELD, "generation-stopped")
            await owner.flush(session)
            assert await host.generation(session) is None
            again = await host.stop(session, "g1")  # an ended generation: nothing to stop
            assert again == StopResult(False, session, "g1", NOT_RUNNING)
        assert await host.request_states(session) == {"decided": 3}


async def test_stop_of_another_generation_changes_nothing(fleet_store: FleetStore) -> None:
    """A stop naming a generation that is not running answers not-running; the running one goes on."""
    session = new_session()
    async with fleet_store.fleet("owner") as owner, fleet_store.fleet("host") as host:
        async with (
            owner.own(LiveRuntime(session_id=session)) as runtime,
            runtime.open_generation("g1") as gen,
        ):
            queued = await host.submit(session, Input("steer", "x", id="a"), "g1")
            for wrong in ("g0", "G1", ""):
                assert await host.stop(session, wrong) == StopResult(False, session, wrong, NOT_RUNNING)
            assert gen.accepting
            assert runtime.receipt("a") == queued
            later = await host.submit(session, Input("steer", "y", id="b"), "g1")
            assert later.disposition is Disposition.QUEUED
            written: list[str] = []
            await gen.boundary(lambda input, metadata: written.append(input.id))
            assert written == ["a", "b"]
        result = await host.stop(session, "g1")  # the owner released the lease
        assert result == StopResult(False, session, "g1", NO_OWNER)
        assert (await host.request_states(session)).get("pending", 0) == 0


async def test_stop_is_decided_after_the_steer_stored_before_it(fleet_store: FleetStore) -> None:
    """A steer stored before a stop is decided first (accepted), then held with the stop's reason."""
    session = new_session()
    receipts = []
    async with fleet_store.fleet("owner") as owner, fleet_store.fleet("host") as host:
        async with (
            owner.own(LiveRuntime(session_id=session)) as runtime,
            runtime.open_generation("g1") as gen,
        ):

            async def steer() -> None:
                receipts.append(await host.submit(session, Input("steer", "x", id="a"), "g1"))

            async with anyio.create_task_group() as tg:
                tg.start_soon(steer)
                await anyio.wait_all_tasks_blocked()  # the steer's insert has begun: it is stored first
                result = await host.stop(session, "g1", StopReason.BUDGET_EXHAUSTED)
            assert result.stopped
            (receipt,) = receipts
            assert (receipt.accepted, receipt.disposition) == (True, Disposition.QUEUED)
            held = runtime.receipt("a")
            assert held is not None
            assert (held.disposition, held.reason) == (Disposition.HELD, "budget-exhausted")
            assert not gen.accepting
            late = await host.submit(session, Input("steer", "y", id="b"), "g1")
            assert (late.accepted, late.reason) == (False, "finishing")  # admission closed, as in-process
        final = await host.receipt(session, "a")
        assert final is not None
        assert (final.disposition, final.reason) == (Disposition.HELD, "budget-exhausted")


async def test_stop_deadline_withdraws_and_is_never_decided(fleet_store: FleetStore) -> None:
    """An owner that does not decide in time: the stop is withdrawn, unreachable, never decided later."""
    session = new_session()
    silent = fleet_store.connection()  # holds the lease and never decides: a partitioned owner
    taken = await anyio.to_thread.run_sync(silent.take, session, "silent", 30.0)
    assert taken is not None
    async with fleet_store.fleet("host") as host, fleet_store.fleet("owner") as owner:
        result = await host.stop(session, "g1", timeout=0.2)
        assert result == StopResult(False, session, "g1", UNREACHABLE)
        assert await host.request_states(session) == {"withdrawn": 1}
        assert host.statistics().unreachable == 1
        await anyio.to_thread.run_sync(silent.release, session, "silent", taken.epoch)
        async with (
            owner.own(LiveRuntime(session_id=session)) as runtime,
            runtime.open_generation("g1") as gen,
        ):
            await owner.flush(session)
            assert gen.accepting  # the withdrawn stop was never decided
        assert await host.request_states(session) == {"withdrawn": 1}
    await anyio.to_thread.run_sync(silent.close)


async def test_stop_refuses_bad_arguments_and_stores_nothing(fleet_store: FleetStore) -> None:
    """A non-string generation id or a reason that is not a StopReason: TypeError, no request stored."""
    session = new_session()
    async with fleet_store.fleet("owner") as owner, fleet_store.fleet("host") as host:
        async with (
            owner.own(LiveRuntime(session_id=session)) as runtime,
            runtime.open_generation("g1") as gen,
        ):
            with pytest.raises(TypeError, match="generation_id"):
                await host.stop(session, 1)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="StopReason"):
                await host.stop(session, "g1", "generation-stopped")  # type: ignore[arg-type]
            assert gen.accepting
        assert await host.request_states(session) == {}
