"""One refusal order on every surface (C7, amended; C27): the same input history gets the same
receipts, reason by reason, in-process and through the fleet on SQLite and PostgreSQL, with one
owner, across an owner change, and with no owner at all.

The order itself is ``live_steering._admission.decide``; the core applies it inline on its fast
paths, so a differential test drives a core with random submissions and checks every answer
against ``decide`` fed with the facts the core holds: a wing (or the core's own fast path) that
re-decided a reason in its own words fails it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet_helpers import FleetStore, new_session
from live_steering import Disposition, Input, LiveRuntime, Receipt, RefusalReason
from live_steering import _admission as admission
from live_steering._core import SteeringCore
from live_steering._validate import input_problem

Submit = Callable[[Input, str], Awaitable[Receipt]]

LIMIT = 3
LONG = "x" * 16_001

#: Each phase: the submissions, as (kind, text, id, anchor). The session's steps between the
#: phases are fixed: g1 runs (phase 1), its inputs are applied and it finishes; nothing runs
#: (phase 2: in the fleet, no owner holds the session); g2 runs (phase 3: in the fleet, a new
#: owner's runtime); g2 closed admission (phase 4); the runtime is closed (phase 5).
PHASES: dict[str, list[tuple[str, str, str, str]]] = {
    "g1 running": [
        ("steer", "x", "a", "g1"),  # valid: queued
        ("steer", "   ", "blank", "g1"),  # blank text
        ("steer", "nul\x00", "nul", "g1"),  # NUL
        ("steer", LONG, "long", "g1"),  # over the 16,000 characters
        ("steer", "x", "i" * 129, "g1"),  # an id over 128 characters
        ("steer", "x", "", "g1"),  # an empty id
        ("steer", "x", "u\udcff", "g1"),  # not encodable as UTF-8
        ("note", "x", "kind", "g1"),  # wrong kind
        ("steer", "x", "stale", "g0"),  # not the running generation
        ("steer", "x", "a", "g1"),  # identical repeat: its receipt
        ("steer", "y", "a", "g1"),  # other text: conflict
        ("steer", "   ", "a", "g1"),  # blank text under a known id: invalid before conflict
        ("note", "x", "a", "g1"),  # wrong kind under a known id
        ("steer", "x", "a", "g0"),  # other anchor under a known id: conflict
        ("steer", "b", "b", "g1"),
        ("steer", "c", "c", "g1"),  # the third identity: the table is full
        ("steer", "d", "d", "g1"),  # capacity
        ("steer", "   ", "d", "g1"),  # invalid before capacity
        ("steer", "x", "stale2", "g0"),  # stale before capacity
    ],
    "nothing running": [
        ("steer", "x", "a", "g1"),  # repeat: applied now
        ("steer", "y", "a", "g1"),  # conflict
        ("steer", "   ", "a", "g1"),  # invalid-input, not identity-conflict
        ("note", "x", "a", "g1"),  # unsupported-kind, not identity-conflict
        ("note", "x", "n1", "g1"),  # unsupported-kind, not stale-generation
        ("steer", "  ", "n2", "g1"),  # invalid-input, not stale-generation
        ("steer", "nul\x00", "n3", "g1"),
        ("steer", LONG, "n4", "g1"),
        ("steer", "x", "u\udcff", "g1"),
        ("steer", "x", "n5", "g1"),  # stale-generation: no generation runs
    ],
    "g2 running": [
        ("steer", "x", "a", "g1"),  # an earlier generation's input: its receipt
        ("steer", "x", "a", "g2"),  # another anchor: conflict
        ("steer", "   ", "a", "g2"),  # invalid-input
        ("note", "x", "b", "g1"),  # unsupported-kind
        ("steer", "x", "n6", "g1"),  # stale-generation: g1 ended
    ],
    "g2 finishing": [
        ("steer", "x", "a", "g1"),
        ("steer", "y", "a", "g1"),
        ("steer", "x", "n7", "g2"),  # finishing (before capacity)
        ("steer", " ", "n8", "g2"),  # invalid-input (before finishing)
    ],
    "closed": [
        ("steer", "x", "a", "g1"),  # a repeat still answers after the close (C1, C10)
        ("steer", "y", "a", "g1"),  # closed
        ("steer", " ", "n9", "g2"),  # closed (before invalid-input)
        ("note", "x", "n10", "g2"),  # closed
    ],
}


def _wire(receipts: list[Receipt]) -> list[dict[str, Any]]:
    return [r.to_dict() for r in receipts]


async def _send(submit: Submit, phase: str) -> list[Receipt]:
    return [await submit(Input(kind, text, id=id_), anchor) for kind, text, id_, anchor in PHASES[phase]]


async def _in_process() -> dict[str, list[Receipt]]:
    out: dict[str, list[Receipt]] = {}
    runtime = LiveRuntime(session_id="parity", identity_limit=LIMIT)
    async with runtime:
        async with runtime.open_generation("g1") as gen:
            out["g1 running"] = await _send(runtime.submit_steering, "g1 running")
            await gen.boundary(lambda input, metadata: None)
            assert not gen.continue_after_checkpoint()
        out["nothing running"] = await _send(runtime.submit_steering, "nothing running")
        async with runtime.open_generation("g2") as gen:
            out["g2 running"] = await _send(runtime.submit_steering, "g2 running")
            assert not gen.continue_after_checkpoint()
            out["g2 finishing"] = await _send(runtime.submit_steering, "g2 finishing")
    out["closed"] = await _send(runtime.submit_steering, "closed")
    return out


pytestmark = pytest.mark.filterwarnings("ignore::live_steering.CheckpointDecisionWarning")


@pytest.mark.anyio
async def test_the_fleet_answers_every_history_as_in_process(fleet_store: FleetStore) -> None:
    """Every phase's receipts through a fleet host equal the in-process ones, reason by reason:
    with the owner deciding, with no owner (the store answers in the core's order), and with a
    new owner whose core retains the earlier owner's identities."""
    expected = await _in_process()
    session = new_session()
    got: dict[str, list[Receipt]] = {}
    async with fleet_store.fleet("owner-1") as first, fleet_store.fleet("host") as host:
        submit: Submit = lambda input, anchor: host.submit(session, input, anchor)  # noqa: E731
        runtime = LiveRuntime(session_id=session, identity_limit=LIMIT)
        async with first.own(runtime), runtime.open_generation("g1") as gen:
            got["g1 running"] = await _send(submit, "g1 running")
            await gen.boundary(lambda input, metadata: None)
            assert not gen.continue_after_checkpoint()
        got["nothing running"] = await _send(submit, "nothing running")  # no live owner
        async with fleet_store.fleet("owner-2") as second:
            runtime = LiveRuntime(session_id=session, identity_limit=LIMIT)
            async with second.own(runtime):
                async with runtime.open_generation("g2") as gen:
                    got["g2 running"] = await _send(submit, "g2 running")
                    assert not gen.continue_after_checkpoint()
                    got["g2 finishing"] = await _send(submit, "g2 finishing")
                await runtime.aclose()  # the owner still holds the lease: its closed core decides
                got["closed"] = await _send(submit, "closed")
    for phase in PHASES:
        assert _wire(got[phase]) == _wire(expected[phase]), phase


@pytest.mark.anyio
async def test_the_in_process_history_meets_every_reason() -> None:
    """The table reaches every refusal reason of the core, each where the one order puts it."""
    got = await _in_process()
    reasons = [r.reason for phase in PHASES for r in got[phase]]
    # (``unavailable`` needs a runtime without boundary delivery: the test below)
    assert {r.value for r in RefusalReason} - {"unavailable"} == {r for r in reasons if r is not None}
    by_row = dict(zip((row for phase in PHASES for row in PHASES[phase]), reasons, strict=True))
    assert by_row[("steer", "   ", "a", "g1")] == "invalid-input"  # not identity-conflict
    assert by_row[("note", "x", "a", "g1")] == "unsupported-kind"
    assert by_row[("steer", " ", "n9", "g2")] == "closed"
    assert by_row[("steer", " ", "n8", "g2")] == "invalid-input"  # before finishing


@pytest.mark.anyio
async def test_unavailable_comes_before_kind_and_validity() -> None:
    """A runtime without boundary delivery refuses ``unavailable`` ahead of every later step."""
    runtime = LiveRuntime(boundary_delivery=False)
    async with runtime, runtime.open_generation("g1"):
        for input in (Input("note", "x", id="a"), Input("steer", " ", id="b"), Input("steer", "x", id="c")):
            assert (await runtime.submit_steering(input, "g1")).reason == "unavailable"


def test_the_orders_reasons_are_the_pinned_strings() -> None:
    """``_admission``'s refusals are exactly C7's reasons plus the hook relay's ``queue-full``."""
    assert {r.value for r in RefusalReason} | {"queue-full"} == admission.REFUSALS
    assert set(admission.DETAILS) == admission.REFUSALS - {"invalid-input"}


@pytest.mark.parametrize(
    ("facts", "answer"),
    [
        ({"closed": True, "same": True, "available": False}, "repeat"),
        ({"closed": True, "problem": "text is blank"}, "closed"),
        ({"available": False, "kind_ok": False}, "unavailable"),
        ({"kind_ok": False, "same": True}, "unsupported-kind"),
        ({"same": True, "running": False, "full": True}, "repeat"),
        ({"known": True, "problem": "text is blank"}, "invalid-input"),
        ({"known": True, "running": False}, "identity-conflict"),
        ({"running": False, "admitting": False, "full": True}, "stale-generation"),
        ({"admitting": False, "queue_full": True}, "finishing"),
        ({"queue_full": True, "full": True}, "queue-full"),
        ({"full": True}, "capacity"),
        ({}, "admit"),
    ],
)
def test_the_order_is_first_match_wins(facts: dict[str, Any], answer: str) -> None:
    """Each step of the order wins over every later one (the docstring's list, step by step)."""
    assert admission.decide(**facts) == answer


# -- the core's inline fast paths against the one order ------------------------------------

_ids = st.sampled_from(["a", "b", "c", "d", "", "i" * 129, "n\x00", "u\udcff", "é"])
_texts = st.sampled_from(["x", "y", "   ", "n\x00", "é", "t\udcff", "z" * 33])
_anchors = st.sampled_from(["g1", "g2", "g0"])
_kinds = st.sampled_from(["steer", "note"])
_steps = st.one_of(
    st.tuples(st.just("submit"), _kinds, _texts, _ids, _anchors),
    st.tuples(st.just("start"), st.sampled_from(["g1", "g2"])),
    st.tuples(st.just("write")),
    st.tuples(st.just("checkpoint")),
    st.tuples(st.just("end")),
    st.tuples(st.just("close")),
)


def _oracle(core: SteeringCore, input: Input, anchor: str) -> str:
    """The answer ``_admission.decide`` gives from what the core holds, before it decides."""
    record = core.identities.get(input.id)
    gen = core.current
    same = record is not None and record.generation_id == anchor and record.input == input
    running = gen is not None and gen.id == anchor
    return admission.decide(
        closed=core.closed,
        available=core.boundary_delivery,
        kind_ok=input.kind == "steer",
        known=record is not None,
        same=same,
        problem=input_problem(input.id, input.text, core.max_text_chars),
        running=running,
        admitting=running and gen is not None and gen.phase.value == "open",
        full=len(core.identities) >= core.identity_limit,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_steps, max_size=40), st.booleans())
def test_the_cores_fast_paths_answer_as_the_one_order(steps: list[tuple[Any, ...]], delivery: bool) -> None:
    """Random histories: every submission's receipt is the one ``_admission.decide`` gives for the
    core's facts (the inline fast paths of admission and repeat included), and ``_check()`` holds."""
    core = SteeringCore(
        session_id="s",
        sink=lambda event: None,
        clock=lambda: 0.0,
        identity_limit=3,
        max_text_chars=32,
        boundary_delivery=delivery,
    )
    started: set[str] = set()
    for step in steps:
        gen = core.current
        match step:
            case ("submit", kind, text, id_, anchor):
                input = Input(kind, text, id=id_)
                expected = _oracle(core, input, anchor)
                before = core.identities.get(id_)
                receipt = core.submit(input, anchor)
                if expected == admission.ADMIT:
                    assert (receipt.accepted, receipt.disposition) == (True, "queued")
                    assert before is None
                    assert core.identities[id_].input == input
                elif expected == admission.REPEAT:
                    assert before is not None
                    assert receipt == before.receipt()
                else:
                    assert (receipt.accepted, receipt.reason) == (False, expected)
            case ("start", generation_id):
                if gen is None and not core.closed and generation_id not in started:
                    core.start_generation(generation_id)
                    started.add(generation_id)
            case ("write",):
                if gen is not None and gen.phase.value == "open" and gen.pending:
                    core.begin_boundary(gen)
                    record = core.next_write(gen)
                    assert record is not None
                    core.confirm_write(gen, record)
                    core.end_boundary(gen)
            case ("checkpoint",):
                if gen is not None and gen.phase.value != "ended":
                    core.after_checkpoint(gen)
            case ("end",):
                if gen is not None:
                    from live_steering._rules import Exit

                    core.end_generation(gen, Exit.RETURNED)
            case ("close",):
                core.close()
        core._check()


def test_a_retained_identity_is_answered_in_the_one_order() -> None:
    """An earlier runtime's identity (``retain``, the fleet's new owner): an identical repeat gets
    its receipt, blank text ``invalid-input``, other text ``identity-conflict``; it is never
    admitted again and does not count toward the limit."""
    from live_steering._admission import content_digest

    events: list[dict[str, Any]] = []
    core = SteeringCore(session_id="s", sink=events.append, clock=lambda: 0.0, identity_limit=1)
    applied = Receipt(True, "a", "g1", Disposition.APPLIED, None)
    core.retain("a", "g1", content_digest("steer", "x"), applied)
    core.start_generation("g2")
    assert core.submit(Input("steer", "x", id="a"), "g1") == applied
    assert events[-1]["type"] == "steering.repeated"
    assert events[-1]["disposition"] == "applied"
    assert core.submit(Input("steer", "  ", id="a"), "g1").reason == "invalid-input"
    assert core.submit(Input("steer", "y", id="a"), "g1").reason == "identity-conflict"
    assert core.submit(Input("steer", "x", id="a"), "g2").reason == "identity-conflict"
    assert core.submit(Input("note", "x", id="a"), "g1").reason == "unsupported-kind"
    assert core.submit(Input("steer", "new", id="b"), "g2").disposition == "queued"  # room for one
    core._check()
    with pytest.raises(ValueError, match="accepted by this runtime"):
        core.retain("b", "g2", content_digest("steer", "new"), applied)
    with pytest.raises(ValueError, match="accepted receipt"):
        core.retain("c", "g1", "digest", Receipt(False, "c", "g1", None, "capacity"))


def test_the_order_needs_nothing_of_the_package() -> None:
    """``_admission`` imports only the standard library: the hook command's path and a store
    without a runtime decide without an event loop, attrs or anything of the package above it."""
    import ast
    import pathlib

    source = pathlib.Path(admission.__file__).read_text()
    imports = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {(n.module or "") if isinstance(n, ast.ImportFrom) else n.names[0].name for n in imports}
    assert names <= {"__future__", "hashlib"}


# -- the hook relay's table, in-process: one order across the two families of surfaces ------


@pytest.mark.anyio
async def test_the_hook_relays_histories_get_the_runtimes_reasons() -> None:
    """The hook relay's parity table (``tests/test_hooks_parity.py``, where ``HookSession`` and both
    durable stores answer it alike) gets the same answers from a runtime, row by row: its
    instructions as steers into one running generation, a delivery as a boundary, the session's
    end as the runtime's close (the relay's ``session-ended`` is the core's ``closed``). Rows
    about the relay's own queue cap (``queue-full``, C26) have no in-process counterpart."""
    from test_hooks_parity import DELIVER, END, IDENTITY_LIMIT, TABLE

    names = {"closed": "session-ended"}
    compared = 0
    for name, history, expected in TABLE:
        if "queue-full" in expected:
            continue
        runtime = LiveRuntime(max_text_chars=10_000, identity_limit=IDENTITY_LIMIT)  # Claude Code's cap
        got: list[str] = []
        async with runtime.open_generation("g1") as gen:
            for step in history:
                if step == END:
                    await runtime.aclose()
                    got.append("-")
                elif step == DELIVER:
                    await gen.boundary(lambda input, metadata: None)
                    got.append("-")
                else:
                    assert isinstance(step, tuple)
                    before = runtime.receipt(step[0])
                    receipt = await runtime.submit_steering(Input("steer", step[1], id=step[0]), "g1")
                    if receipt.accepted:
                        got.append("repeat" if before is not None else "admit")
                    else:
                        got.append(names.get(str(receipt.reason), str(receipt.reason)))
            if not runtime.closed:
                gen.stop()
        assert got == expected, name
        compared += 1
    assert compared >= 15  # every row but the relay's own queue cap
