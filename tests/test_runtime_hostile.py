"""Hostile input corpus (C6, C7, C10, C24): every submission gets a receipt or a TypeError, nothing breaks.

Each hostile value is submitted through the capability into a running generation;
the test asserts the exact refusal reason (or acceptance, where the contract admits
the value), that a refusal used no identity, that the runtime's invariants hold,
that every event is JSON-serialisable, and that the runtime still delivers a valid
steer afterwards. The whole recorded history is then checked.
"""

from __future__ import annotations

import collections
import json
import os
import unicodedata
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from live_steering import Disposition, Input, LiveRuntime, Receipt
from live_steering.testing import History, RecordingContext

pytestmark = pytest.mark.anyio

GEN = "gen-hostile"


class Session:
    """A runtime with one open generation, every submission recorded in a History."""

    def __init__(self, runtime: LiveRuntime, history: History) -> None:
        self.runtime = runtime
        self.history = history

    async def submit(self, input: Any, generation_id: Any = GEN) -> Receipt:
        receipt = await self.history.submit(input, generation_id)
        self.runtime._check()
        for event in self.runtime.recent_events():
            json.dumps(event)
        json.dumps(receipt.to_dict())
        return receipt

    async def refused(self, input: Any, reason: str, generation_id: Any = GEN) -> None:
        before = self.runtime.statistics().identities
        receipt = await self.submit(input, generation_id)
        assert not receipt.accepted
        assert receipt.disposition is None
        assert receipt.reason == reason
        assert self.runtime.statistics().identities == before
        assert self.history.events[-1]["type"] == "steering.refused"
        assert self.history.events[-1]["reason"] == reason

    async def accepted(self, input: Input) -> Receipt:
        receipt = await self.submit(input)
        assert receipt.accepted
        assert receipt.disposition is Disposition.QUEUED
        assert type(receipt.input_id) is str
        return receipt


@pytest.fixture
async def session() -> AsyncIterator[Session]:
    """An open generation; on teardown a valid steer is delivered and the whole history checked."""
    runtime = LiveRuntime(session_id="hostile")
    history = History.attach(runtime)
    context = RecordingContext()
    async with runtime.open_generation(GEN) as gen:
        yield Session(runtime, history)
        assert (await history.submit(Input("steer", "still alive", id="after-hostile"), GEN)).accepted
        await gen.boundary(context.add_steer)
        assert not gen.continue_after_checkpoint()
    assert "after-hostile" in context.steer_ids()
    runtime._check()
    history.check(require_final=True).assert_ok()
    json.dumps(runtime.recent_events())


class EvilStr(str):
    """A str subclass that lies about equality, hashing, printing and length."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0

    def __str__(self) -> str:
        return "evil"

    def __len__(self) -> int:
        return 1


NOT_INPUTS: list[Any] = [None, "steer", b"steer", {"kind": "steer", "text": "x", "id": "a"}, 42, object()]


@pytest.mark.parametrize("value", NOT_INPUTS, ids=lambda v: type(v).__name__)
async def test_non_input_raises_type_error_and_changes_nothing(session: Session, value: Any) -> None:
    """Anything but an Input raises TypeError and emits no event (C6)."""
    before = len(session.history.events)
    with pytest.raises(TypeError):
        await session.submit(value)
    assert len(session.history.events) == before


@pytest.mark.parametrize("anchor", [None, b"gen-hostile", 1, ["gen-hostile"]], ids=repr)
async def test_non_str_anchor_raises_type_error(session: Session, anchor: Any) -> None:
    """A generation id that is not a str raises TypeError and emits no event (C6)."""
    before = len(session.history.events)
    with pytest.raises(TypeError):
        await session.submit(Input("steer", "x", id="a"), anchor)
    assert len(session.history.events) == before


@pytest.mark.parametrize(
    "build",
    [
        lambda: Input(b"steer", "x"),
        lambda: Input("steer", b"text"),
        lambda: Input("steer", "x", id=b"id"),
        lambda: Input("steer", "x", id=7),
        lambda: Input("steer", None),
        lambda: Input("steer", bytearray(b"x")),
    ],
)
def test_wrong_field_types_raise_type_error_at_construction(build: Any) -> None:
    """Bytes, ints and None in an Input's fields are a TypeError before any runtime sees them."""
    with pytest.raises(TypeError):
        build()


@pytest.mark.parametrize(
    ("kind", "text", "input_id", "reason"),
    [
        ("Steer", "x", "k1", "unsupported-kind"),
        ("steer ", "x", "k2", "unsupported-kind"),
        ("", "x", "k3", "unsupported-kind"),
        ("prompt", "x", "k4", "unsupported-kind"),
        ("steer", "", "t1", "invalid-input"),
        ("steer", "   \n\t\u3000", "t2", "invalid-input"),
        ("steer", "x" * 16_001, "t3", "invalid-input"),
        ("steer", "x" * 10_000_000, "t4", "invalid-input"),
        ("steer", "bad \ud800 surrogate", "t5", "invalid-input"),
        ("steer", "lone low \udfff", "t6", "invalid-input"),
        ("steer", "nul \x00 inside", "t7", "invalid-input"),
        ("steer", "x", "", "invalid-input"),
        ("steer", "x", "i" * 129, "invalid-input"),
        ("steer", "x", "i" * 100_000, "invalid-input"),
        ("steer", "x", "id-\ud83d", "invalid-input"),
        ("steer", "x", "id\x00", "invalid-input"),
        ("steer", "x", "\U0001f600" * 129, "invalid-input"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 20 and v.isprintable() else "*",
)
async def test_malformed_content_is_refused_with_its_reason(
    session: Session, kind: str, text: str, input_id: str, reason: str
) -> None:
    """Each malformed kind, text or id is refused at admission with the pinned reason (C7)."""
    await session.refused(Input(kind, text, id=input_id), reason)
    # a refusal used no identity: the same id with valid content is admitted afterwards
    if 1 <= len(input_id) <= 128 and "\x00" not in input_id and "\ud83d" not in input_id:
        await session.accepted(Input("steer", "valid now", id=input_id))


async def test_refusal_event_of_a_huge_id_is_bounded(session: Session) -> None:
    """A 100,000-character id is refused; its event carries at most 256 characters, the receipt all."""
    huge = "h" * 100_000
    receipt = await session.submit(Input("steer", "x", id=huge))
    assert receipt.reason == "invalid-input"
    assert receipt.input_id == huge
    assert len(session.history.events[-1]["input_id"]) == 256


@pytest.mark.parametrize(
    ("text", "input_id"),
    [
        ("x" * 16_000, "limit-text"),
        ("x", "i" * 128),
        ("x", "\U0001f600" * 128),  # 128 characters, 512 UTF-8 bytes: the limit counts characters
        ("bell \x07 escape \x1b[31m del \x7f", "ctl-1"),
        ("line\u2028separator\u2029para", "ctl-2"),
        ("zero\u200bwidth\ufeffbom", "ctl-3"),
        ("tab\tand\nnewline", "ctl-\t-id"),
        ("rtl \u202e override", "\u202eid"),
    ],
    ids=lambda v: repr(v)[:24],
)
async def test_values_the_contract_admits_are_accepted_and_written_verbatim(
    session: Session, text: str, input_id: str
) -> None:
    """Control characters other than NUL, and values at the limits, are admitted unchanged (C7)."""
    await session.accepted(Input("steer", text, id=input_id))
    assert session.runtime.receipt(input_id) is not None


async def test_case_and_normalisation_variants_are_distinct_identities(session: Session) -> None:
    """Ids are compared exactly: case and Unicode normalisation variants are separate identities."""
    composed = "caf\u00e9"
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    variants = ["Fix-1", "fix-1", "FIX-1", composed, decomposed, "\ufb01x", "fix", "\u212b", "\u00c5"]
    for n, variant in enumerate(variants):
        await session.accepted(Input("steer", f"text {n}", id=variant))
    assert session.runtime.statistics().identities == len(variants)
    # and each answers as itself
    for n, variant in enumerate(variants):
        again = await session.submit(Input("steer", f"text {n}", id=variant))
        assert again.accepted
        assert session.history.events[-1]["type"] == "steering.repeated"
    # a non-NFC text is kept as sent, not normalised
    await session.accepted(Input("steer", decomposed, id="nfd-text"))


async def test_str_subclasses_cannot_lie_their_way_into_an_identity(session: Session) -> None:
    """A str subclass overriding __eq__/__hash__/__str__/__len__ is judged by its real value."""
    first = Input(EvilStr("steer"), EvilStr("real text"), id=EvilStr("evil-id"))
    assert type(first.id) is str
    assert first.id == "evil-id"
    await session.accepted(first)
    # the lying __eq__ must not make a different id collide with it
    await session.accepted(Input("steer", "other", id="other-id"))
    # a plain-str repeat of the same value is a repeat, not a new identity
    again = await session.submit(Input("steer", "real text", id="evil-id"))
    assert again.accepted
    assert session.history.events[-1]["type"] == "steering.repeated"
    # __len__ lies (1), but the real id is 129 characters
    await session.refused(Input("steer", "x", id=EvilStr("L" * 129)), "invalid-input")
    # an anchor that claims to equal everything is still another generation
    await session.refused(Input("steer", "x", id="anchor-lie"), "stale-generation", EvilStr("gen-other"))
    # an anchor subclass with the right value is that generation
    await session.accepted(Input("steer", "x", id="anchor-sub"))
    rep = await session.submit(Input("steer", "x", id="anchor-sub"), EvilStr(GEN))
    assert rep.accepted
    assert rep.disposition is Disposition.QUEUED


async def test_conflicting_repeats_of_hostile_ids_are_refused(session: Session) -> None:
    """The same id with other text, or another anchor, is an identity conflict (C10)."""
    await session.accepted(Input("steer", "original", id="dup"))
    await session.refused(Input("steer", "original ", id="dup"), "identity-conflict")
    await session.refused(Input("steer", "original", id="dup"), "identity-conflict", "gen-elsewhere")
    assert session.runtime.receipt("dup") == Receipt(True, "dup", GEN, Disposition.QUEUED)


async def test_refusal_events_are_json_serialisable_even_for_surrogate_ids(session: Session) -> None:
    """A refused lone-surrogate id gives an event writable as UTF-8 JSON, the surrogate escaped (C21)."""
    await session.refused(Input("steer", "x", id="\udc80bad"), "invalid-input")
    line = json.dumps(session.history.events[-1], ensure_ascii=False).encode("utf-8")
    assert json.loads(line)["input_id"] == "\\udc80bad"


ANY_CHAR = st.characters(exclude_categories=())  # includes lone surrogates and NUL


SUBMISSIONS = st.lists(
    st.tuples(
        st.sampled_from(["steer", "steer", "Steer", ""]),
        st.text(ANY_CHAR, max_size=40) | st.just("x" * 16_001),
        st.text(ANY_CHAR, max_size=140) | st.sampled_from(["a", "b", "A"]),
        st.sampled_from([GEN, GEN, "gen-stale"]),
    ),
    max_size=25,
)
HEALTH = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
#: Inputs tried and how they were answered, for docs/reliability.md.
TRIED: collections.Counter[str] = collections.Counter()


def submit_all(backend: str, submissions: list[tuple[str, str, str, str]]) -> None:
    """Submit every tuple into one open generation; only receipts, state intact, all delivered."""

    async def program() -> None:
        runtime = LiveRuntime(identity_limit=8)
        history = History.attach(runtime)
        context = RecordingContext()
        async with runtime.open_generation(GEN) as gen:
            for kind, text, input_id, anchor in submissions:
                receipt = await history.submit(Input(kind, text, id=input_id), anchor)
                runtime._check()
                TRIED["inputs"] += 1
                TRIED[receipt.reason or "accepted"] += 1
                if receipt.accepted:
                    assert kind == "steer"
                    assert anchor == GEN
                    assert 1 <= len(input_id) <= 128
                    assert "\x00" not in text + input_id
                    assert text.strip()
                    assert (text + input_id).encode("utf-8")
            await gen.boundary(context.add_steer)
            assert not gen.continue_after_checkpoint()
        admitted = [e["input_id"] for e in history.events if e["type"] == "steering.accepted"]
        assert context.steer_ids() == admitted
        history.check(require_final=True).assert_ok()
        json.dumps(runtime.recent_events())

    anyio.run(program, backend=backend)


@settings(max_examples=60, deadline=None, suppress_health_check=HEALTH)
@given(SUBMISSIONS)
def test_any_unicode_gets_a_receipt_and_keeps_state_consistent(
    anyio_backend: str, submissions: list[tuple[str, str, str, str]]
) -> None:
    """Arbitrary Unicode (surrogates, NUL, controls) in kind/text/id/anchor: receipts only, state intact."""
    submit_all(anyio_backend, submissions)


@pytest.mark.slow
@settings(max_examples=3_000, deadline=None, suppress_health_check=HEALTH)
@given(SUBMISSIONS)
def test_any_unicode_long(anyio_backend: str, submissions: list[tuple[str, str, str, str]]) -> None:
    """The same corpus run long, for the published figures."""
    submit_all(anyio_backend, submissions)
    if os.environ.get("LIVE_STEERING_FIGURES"):
        path = os.path.join(os.environ["LIVE_STEERING_FIGURES"], "hostile.txt")
        with open(path, "w") as out:
            out.write(f"{dict(sorted(TRIED.items()))}\n")


@pytest.mark.parametrize("field", ["kind", "text", "id"])
@pytest.mark.parametrize("value", [["a list"], b"bytes", None], ids=["list", "bytes", "none"])
async def test_an_input_forged_past_its_converters_is_a_type_error(field: str, value: object) -> None:
    """C6/C24: an Input whose frozen fields were forged to non-str raises TypeError and changes nothing."""
    runtime = LiveRuntime()
    async with runtime.open_generation(GEN) as gen:
        forged = Input("steer", "text", id="forged")
        object.__setattr__(forged, field, value)
        before = runtime.statistics()
        with pytest.raises(TypeError, match="plain str"):
            await runtime.submit_steering(forged, GEN)
        assert runtime.statistics() == before
        runtime._check()
        gen.stop()
