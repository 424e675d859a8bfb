"""One refusal order on every surface of the hook relay (C7, C26, C26b): ``HookSession``,
``SqliteHookStore`` and ``PostgresHookStore`` answer one table of histories row by row alike.

Each surface gathers its facts and asks ``hooks._admit.decide`` (``_admission.decide``
with the relay's facts filled in), so the same history gets the same reasons everywhere,
in the core's order: an ended session (the core's ``closed``: an identical repeat still
answers) -> identical repeat -> ``invalid-input`` -> ``identity-conflict`` ->
``queue-full`` -> ``capacity``.
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Callable, Iterator

import pytest

from live_steering import _admission
from live_steering.hooks import HookSession, InstructionRefusal, SqliteHookStore, Vendor, _admit
from live_steering.hooks._store import RelayStore

VENDOR = "claude-code"
SESSION = "s"
#: Small limits, so "queue full" and "capacity" are a few steps away.
CAPACITY, IDENTITY_LIMIT = 2, 3
END, DELIVER = "end", "deliver"

Step = tuple[str, str] | str
#: (name, history, the answer to each step): ``admit``, ``repeat`` or a refusal reason;
#: ``-`` for a hook moment (the session's end, or a delivery).
TABLE: list[tuple[str, list[Step], list[str]]] = [
    ("valid", [("a", "x")], ["admit"]),
    ("blank", [("a", " \n")], ["invalid-input"]),
    ("nul", [("a", "x\x00y")], ["invalid-input"]),
    ("over-long", [("a", "x" * 10_001)], ["invalid-input"]),
    ("bad-id", [("", "x")], ["invalid-input"]),
    ("repeat", [("a", "x"), ("a", "x")], ["admit", "repeat"]),
    ("conflict", [("a", "x"), ("a", "y")], ["admit", "identity-conflict"]),
    ("blank-on-known-id", [("a", "x"), ("a", " ")], ["admit", "invalid-input"]),
    ("nul-on-known-id", [("a", "x"), ("a", "x\x00")], ["admit", "invalid-input"]),
    ("after-end", [("a", "x"), END, ("b", "y")], ["admit", "-", "session-ended"]),
    ("repeat-after-end", [("a", "x"), END, ("a", "x")], ["admit", "-", "repeat"]),
    ("conflict-after-end", [("a", "x"), END, ("a", "y")], ["admit", "-", "session-ended"]),
    ("blank-after-end", [END, ("b", " ")], ["-", "session-ended"]),
    ("queue-full", [("a", "x"), ("b", "y"), ("c", "z")], ["admit", "admit", "queue-full"]),
    ("blank-when-full", [("a", "x"), ("b", "y"), ("c", " ")], ["admit", "admit", "invalid-input"]),
    ("conflict-when-full", [("a", "x"), ("b", "y"), ("a", "z")], ["admit", "admit", "identity-conflict"]),
    ("repeat-when-full", [("a", "x"), ("b", "y"), ("a", "x")], ["admit", "admit", "repeat"]),
    (
        "capacity",
        [("a", "x"), ("b", "y"), DELIVER, ("c", "z"), ("d", "w")],
        ["admit", "admit", "-", "admit", "capacity"],
    ),
    (
        "queue-full-before-capacity",
        [("a", "x"), DELIVER, ("b", "y"), ("c", "z"), ("d", "w")],
        ["admit", "-", "admit", "admit", "queue-full"],
    ),
    (
        "repeat-at-capacity",
        [("a", "x"), ("b", "y"), DELIVER, ("c", "z"), ("a", "x")],
        ["admit", "admit", "-", "admit", "repeat"],
    ),
]


def answer(accepted: bool, repeated: bool, reason: str | None) -> str:
    if repeated:
        return "repeat"
    return "admit" if accepted else str(reason)


def on_session(history: list[Step]) -> list[str]:
    session = HookSession(Vendor.CLAUDE_CODE, SESSION, capacity=CAPACITY, identity_limit=IDENTITY_LIMIT)
    out = []
    for step in history:
        if isinstance(step, tuple):
            receipt = session.enqueue(*step)
            out.append(answer(receipt.accepted, receipt.repeated, receipt.reason))
        elif step == END:
            session.on_hook("SessionEnd", reply_would_be_empty=True)
            out.append("-")
        else:
            assert session.on_hook("PostToolUse", reply_would_be_empty=True).delivered
            out.append("-")
        session._check()
    return out


def on_store(store: RelayStore, history: list[Step]) -> list[str]:
    out = []
    for step in history:
        if isinstance(step, tuple):
            command_id, text = step
            receipt = store.enqueue(SESSION, command_id, text, vendor=VENDOR)
            out.append(answer(receipt.accepted, receipt.repeated, receipt.reason))
        elif step == END:
            store.claim(VENDOR, SESSION, "SessionEnd")
            out.append("-")
        else:
            claim = store.claim(VENDOR, SESSION, "PostToolUse")
            assert claim.delivered
            store.confirm(claim)
            out.append("-")
    return out


@pytest.fixture
def postgres_store(postgres_dsn: str) -> Iterator[Callable[[], RelayStore]]:
    """A factory of PostgreSQL hook stores, each in a fresh schema."""
    import psycopg

    from live_steering.hooks._postgres import PostgresHookStore

    opened: list[RelayStore] = []

    def make() -> RelayStore:
        schema = f"parity_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        store = PostgresHookStore(
            f"{postgres_dsn} options='-c search_path={schema}'",
            capacity=CAPACITY,
            identity_limit=IDENTITY_LIMIT,
        )
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.mark.parametrize(("history", "expected"), [(h, e) for _, h, e in TABLE], ids=[n for n, _, _ in TABLE])
def test_every_surface_answers_each_history_alike(
    tmp_path: pathlib.Path,
    postgres_store: Callable[[], RelayStore],
    history: list[Step],
    expected: list[str],
) -> None:
    """HookSession, the SQLite store and the PostgreSQL store give the same answer at every step."""
    with SqliteHookStore(tmp_path / "hooks.db", capacity=CAPACITY, identity_limit=IDENTITY_LIMIT) as sqlite:
        answers = {
            "session": on_session(history),
            "sqlite": on_store(sqlite, history),
            "postgres": on_store(postgres_store(), history),
        }
    assert answers == dict.fromkeys(answers, expected)


def test_the_relay_refuses_with_its_pinned_reasons_in_the_core_order() -> None:
    """``_admit`` answers the values of ``InstructionRefusal``, in the order ``_admission.ORDER`` gives."""
    assert set(_admit.REASONS) == {r.value for r in InstructionRefusal}
    core = [_admission.CLOSED if r == _admit.SESSION_ENDED else r for r in _admit.REASONS]
    assert core == sorted(core, key=_admission.ORDER.index)


def test_the_decision_is_the_cores_with_the_relays_facts() -> None:
    """Every combination of facts: ``_admit.decide`` is ``_admission.decide`` (``closed`` named
    ``session-ended``; running, admitting, available and the kind always true)."""
    import itertools

    for ended, known, same, invalid, queue_full, full in itertools.product((False, True), repeat=6):
        if same and not known:
            continue  # an identical repeat is of a known id
        problem = "text is blank" if invalid else None
        core = _admission.decide(
            closed=ended, known=known, same=same, problem=problem, queue_full=queue_full, full=full
        )
        relay = _admit.decide(
            ended=ended, known=known, same=same, problem=problem, queue_full=queue_full, full=full
        )
        assert relay == (_admit.SESSION_ENDED if core == _admission.CLOSED else core)


def test_admit_doctests_pass() -> None:
    """The examples in ``_admit``'s docstrings run and say what they show."""
    import doctest

    result = doctest.testmod(_admit)
    assert result.attempted > 0
    assert result.failed == 0
