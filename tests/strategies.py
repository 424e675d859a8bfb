"""Shared Hypothesis strategies: well-formed and hostile ids, texts and inputs (C7, C24).

``valid_*`` strategies only produce values the core admits (given a running
generation and free capacity); ``hostile_*`` ones mix in everything C7 refuses
and C24 says must never crash the runtime: NUL, lone surrogates, control and
bidi characters, blank text, empty and over-long ids, text just over the limit.
"""

from __future__ import annotations

from hypothesis import strategies as st

from live_steering import Input

__all__ = [
    "HOSTILE_CHARACTERS",
    "hostile_ids",
    "hostile_inputs",
    "hostile_texts",
    "kinds",
    "valid_ids",
    "valid_inputs",
    "valid_texts",
]

#: Characters that a sloppy host, a broken bridge or an attacker may put in a string.
HOSTILE_CHARACTERS = (
    "\x00",  # NUL: refused (C7)
    "\ud800",  # lone high surrogate: not encodable as UTF-8 (C7)
    "\udfff",  # lone low surrogate
    "\x1b",  # ESC, a control character: allowed, must not crash
    "\x7f",
    "\u202e",  # right-to-left override
    "\ufeff",  # BOM
    "\u200b",  # zero-width space (not whitespace for str.isspace)
    " ",
    "\t",
    "\n",
    "\u3000",  # ideographic space (whitespace)
    "\U0001f600",  # astral plane
)

# st.text() excludes surrogates by default; "\x00" is excluded explicitly so these stay valid.
_clean_characters = st.characters(exclude_characters="\x00", exclude_categories=["Cs"])

valid_ids = st.text(_clean_characters, min_size=1, max_size=128)
"""Ids the core admits: 1-128 characters, no NUL, encodable as UTF-8."""

valid_texts = st.text(_clean_characters, min_size=1, max_size=200).filter(lambda t: not t.isspace())
"""Texts the core admits under the default limit: not blank, no NUL, encodable."""

kinds = st.sampled_from(["steer", "Steer", "prompt", "", "steer ", "interrupt"])
"""Input kinds; only ``"steer"`` is supported through the capability."""


def _mixed_text(max_size: int) -> st.SearchStrategy[str]:
    pieces = st.one_of(st.text(max_size=8), st.sampled_from(HOSTILE_CHARACTERS))
    return st.lists(pieces, max_size=max_size).map("".join)


hostile_ids = st.one_of(
    valid_ids,
    st.just(""),
    st.integers(min_value=127, max_value=130).map(lambda n: "i" * n),
    _mixed_text(20).filter(bool),
    st.text(min_size=129, max_size=300),
)
"""Ids of every shape, valid or not (empty, too long, NUL, surrogates, controls)."""

hostile_texts = st.one_of(
    valid_texts,
    st.sampled_from(["", " ", "\n\t ", "\u3000", "\x00", "\ud800"]),
    _mixed_text(30),
    st.integers(min_value=15_999, max_value=16_001).map(lambda n: "t" * n),
    # Larger texts are tested directly: Hypothesis refuses to print reprs over 30 kB.
    st.just("t" * 20_000),
)
"""Texts of every shape, valid or not (blank, NUL, surrogates, controls, at and over the limit)."""

valid_inputs = st.builds(Input, st.just("steer"), valid_texts, id=valid_ids)
"""Steer inputs the core admits."""

hostile_inputs = st.builds(Input, kinds, hostile_texts, id=hostile_ids)
"""Inputs of every shape; each must get a receipt, never crash (C24)."""
