"""Pinned value objects: ``Input``, ``Receipt`` and the closed vocabularies (C3, C4, C7, C17)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from live_steering import Disposition, HoldReason, Input, Receipt, RefusalReason
from strategies import hostile_ids, hostile_texts


def _as_str(value: str) -> str:
    """Widen a str enum member to ``str`` so the comparison with a plain string type-checks."""
    return value


class SneakyStr(str):
    """A str subclass whose equality and hash lie; identity decisions must not use them."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


# -- Input (C3) ---------------------------------------------------------------------------


def test_input_takes_kind_and_text_positionally_and_id_by_keyword() -> None:
    """C3: ``Input("steer", text, id=...)`` is the pinned constructor shape."""
    item = Input("steer", "Use the corrected path", id="fix-1")
    assert (item.kind, item.text, item.id) == ("steer", "Use the corrected path", "fix-1")


def test_input_id_cannot_be_positional() -> None:
    """C3: ``id`` is keyword-only, so a third positional argument is a TypeError."""
    with pytest.raises(TypeError):
        Input("steer", "text", "fix-1")  # type: ignore[call-arg]


def test_input_without_id_gets_a_fresh_unique_id() -> None:
    """C3: an input made without an id gets a non-empty random one, unique per input."""
    first, second = Input("steer", "same"), Input("steer", "same")
    assert first.id
    assert second.id
    assert first.id != second.id
    assert first != second


def test_input_is_immutable() -> None:
    """C3: no field of an ``Input`` can be reassigned."""
    item = Input("steer", "text", id="a")
    for field in ("kind", "text", "id"):
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(item, field, "other")
    assert item == Input("steer", "text", id="a")


def test_input_is_hashable_and_equal_by_value() -> None:
    """C3: equal inputs hash equal, so they can key dicts and sets."""
    a, b = Input("steer", "text", id="a"), Input("steer", "text", id="a")
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b, Input("steer", "text", id="b")}) == 2


@pytest.mark.parametrize("field", ["kind", "text", "id"])
def test_input_copies_str_subclasses_to_plain_str(field: str) -> None:
    """C3/C10: a str subclass is copied to an exact ``str`` so user ``__eq__`` never decides identity."""
    values: dict[str, Any] = {"kind": "steer", "text": "text", "id": "a"}
    values[field] = SneakyStr(values[field])
    item = Input(values["kind"], values["text"], id=values["id"])
    stored = getattr(item, field)
    assert type(stored) is str
    assert stored == str.__str__(values[field])
    other = {"kind": "steer", "text": "text", "id": "a", field: "different"}
    assert item != Input(other["kind"], other["text"], id=other["id"])


@pytest.mark.parametrize(
    ("kind", "text", "id_"),
    [
        (1, "text", "a"),
        ("steer", b"text", "a"),
        ("steer", None, "a"),
        ("steer", "text", 7),
        ("steer", "text", None),
        (None, "text", "a"),
        ("steer", ["t"], "a"),
    ],
)
def test_input_rejects_non_str_fields_with_type_error(kind: Any, text: Any, id_: Any) -> None:
    """C6: a non-string field is a caller's type error, raised at construction, naming the field."""
    fields = (("kind", kind), ("text", text), ("id", id_))
    field = next(name for name, value in fields if type(value) is not str)
    with pytest.raises(TypeError, match=rf"^Input\.{field} must be a str, got "):
        Input(kind, text, id=id_)


@given(text=hostile_texts, id_=hostile_ids)
def test_input_construction_never_judges_content(text: str, id_: str) -> None:
    """C6/C24: any strings make an Input; content rules are decided at admission, as receipts."""
    item = Input("steer", text, id=id_)
    assert (item.text, item.id) == (text, id_)


# -- Receipt (C4) ---------------------------------------------------------------------------


def test_receipt_has_the_pinned_fields() -> None:
    """C4: a receipt carries accepted, input_id, generation_id, disposition and reason."""
    receipt = Receipt(True, "a", "g1", Disposition.QUEUED)
    assert [f.name for f in attrs.fields(Receipt)] == [
        "accepted",
        "input_id",
        "generation_id",
        "disposition",
        "reason",
    ]
    assert receipt.reason is None


def test_receipt_is_immutable() -> None:
    """C4: a receipt cannot be changed after it was handed out."""
    receipt = Receipt(True, "a", "g1", Disposition.QUEUED)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        receipt.accepted = False  # type: ignore[misc]


def test_receipt_to_dict_omits_reason_when_none() -> None:
    """C4: the wire shape has exactly accepted/inputId/generationId/disposition without a reason."""
    wire = Receipt(True, "fix-1", "g1", Disposition.QUEUED).to_dict()
    assert wire == {"accepted": True, "inputId": "fix-1", "generationId": "g1", "disposition": "queued"}
    assert type(wire["disposition"]) is str


def test_receipt_to_dict_of_a_refusal() -> None:
    """C4/C6: a refusal's wire shape has disposition null and the pinned reason string."""
    wire = Receipt(False, "fix-1", "g1", None, RefusalReason.CAPACITY.value).to_dict()
    assert wire == {
        "accepted": False,
        "inputId": "fix-1",
        "generationId": "g1",
        "disposition": None,
        "reason": "capacity",
    }
    assert json.loads(json.dumps(wire)) == wire


@pytest.mark.parametrize("disposition", list(Disposition))
def test_receipt_to_dict_is_plain_json_for_every_disposition(disposition: Disposition) -> None:
    """C4: enums become their plain strings, so hosts persist the wire shape as JSON."""
    reason = HoldReason.GENERATION_STOPPED if disposition is Disposition.HELD else None
    wire = Receipt(True, "a", "g", disposition, reason).to_dict()
    assert wire["disposition"] == disposition.value
    assert type(wire["disposition"]) is str
    if reason is None:
        assert "reason" not in wire
    else:
        assert wire["reason"] == "generation-stopped"
        assert type(wire["reason"]) is str
    assert json.loads(json.dumps(wire)) == wire


# -- vocabularies (C4, C7, C15, C17, C23) -----------------------------------------------------


def test_disposition_has_exactly_the_four_pinned_values() -> None:
    """C4: ``Disposition`` is a str enum with exactly queued, applied, held and unknown."""
    assert {d.value for d in Disposition} == {"queued", "applied", "held", "unknown"}
    assert len(Disposition) == 4
    assert all(isinstance(d, str) for d in Disposition)
    assert Disposition("applied") is Disposition.APPLIED
    assert _as_str(Disposition.HELD) == "held"


def test_refusal_reasons_are_the_pinned_strings() -> None:
    """C7: refusal reasons are exactly the eight pinned machine-readable strings."""
    assert {r.value for r in RefusalReason} == {
        "invalid-input",
        "unsupported-kind",
        "unavailable",
        "stale-generation",
        "finishing",
        "identity-conflict",
        "capacity",
        "closed",
    }
    assert _as_str(RefusalReason.INVALID_INPUT) == "invalid-input"
    assert _as_str(RefusalReason.IDENTITY_CONFLICT) == "identity-conflict"


def test_hold_reasons_are_the_pinned_strings() -> None:
    """C15/C17/C23: held and unknown reasons are exactly the pinned strings."""
    assert {r.value for r in HoldReason} == {
        "generation-stopped",
        "generation-cancelled",
        "generation-failed",
        "budget-exhausted",
        "runtime-closed",
        "write-interrupted",
        "runtime-lost",
    }
    assert _as_str(HoldReason.BUDGET_EXHAUSTED) == "budget-exhausted"
    assert _as_str(HoldReason.WRITE_INTERRUPTED) == "write-interrupted"


@given(st.sampled_from(list(RefusalReason) + list(HoldReason)))
def test_reasons_serialise_as_their_plain_value(reason: str) -> None:
    """C4: a reason written to JSON is its pinned string, not an enum repr."""
    assert json.dumps(reason) == json.dumps(str(reason))
    assert str(reason) == reason
