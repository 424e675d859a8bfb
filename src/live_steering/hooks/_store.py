"""The relay's durable store: per-session instruction queues and the audit stream (C26b).

Theory of operation
-------------------
A vendor runs its hook command as a fresh process per hook moment, and a host
sends instructions from yet another process, so the per-session queue lives in
a store every process opens: one SQLite file (``_sqlite.py``) or one PostgreSQL
database (``_postgres.py``). ``HookStore`` is the interface; ``RelayStore`` below is
the queue, written once against a narrow dialect (the procrastinate/huey pattern,
STYLE.md "Store wings"): ``_run(name, params)`` runs one of the engine's named
statements (``STATEMENT_NAMES``, each engine spells all of them), ``_transaction``
makes one atomic step, ``_new_token`` and ``_claimant_alive`` say who claimed and
whether it lives. An engine provides those and its connection; it never decides,
and no engine's class rewrites another's SQL.

An instruction moves ``queued -> delivering -> delivered``, or ``queued ->
dropped`` (its session ended, or it is over the cap of the vendor that finally
claims the session: ``reason: "over-cap"``, so it never stalls the queue), or
``delivering -> unknown`` (the hook process that claimed it died before its reply
was written out: it may or may not have reached the model). Rules the methods
keep, each in one transaction:

* ``claim`` takes every eligible queued instruction of the session, in arrival
  order, as many as fit the vendor's cap, and marks them ``delivering`` under a
  token naming its claimant, *before* the reply exists. The reply is written by the
  caller; ``confirm`` then marks them ``delivered``. A claim is never re-queued, so
  nothing is ever delivered twice.
* A ``delivering`` row whose claimant is dead (or older than ``MAX_CLAIM_SECONDS``)
  is finalised ``unknown`` by the next ``claim`` or ``enqueue`` of its session, or by
  ``recover``. It is never delivered again.
* Every move is one row in ``events``, in the same transaction as the move:
  sequence-numbered per store, cause-linked to the command id. Refusals change
  nothing but the audit stream.
* Admission is ``_admit.decide`` on the facts the store holds (the one refusal
  order, as the in-memory ``HookSession`` and the runtime's core answer);
  eligibility and batching are ``_vendors.py``'s, as ``HookSession``'s.

Schema versions: the version lives in a meta table (key ``schema_version``) in both
engines, read and written by the dialect's ``read_version``/``write_version``, so
``_prepare`` below opens, creates and migrates both stores the same way: an empty
store gets today's layout, an older one each numbered migration of its engine in
order, all in one transaction; a newer one is refused with a ``StoreError`` naming
both versions (see ``_sqlite.py`` for SQLite's version 1, which predates the table).

This module is on the hook command's path: it imports the standard library only
(no attrs, no anyio, no ``typing``), and a hook moment that finds nothing to do
reads without writing.
"""

from __future__ import annotations

import abc
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from .._errors import LiveSteeringError
from . import _admit, _vendors

# ``typing`` costs the hook command's process 2 ms; mypy reads this constant as typing.TYPE_CHECKING.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from typing import Any, Protocol

    class Rows(Protocol):
        """What ``_run`` returns: a DB-API cursor (``sqlite3.Cursor``, ``psycopg.Cursor``)."""

        def fetchone(self) -> Any: ...
        def fetchall(self) -> list[Any]: ...
        def __iter__(self) -> Iterator[Any]: ...


__all__ = [
    "DEFAULT_QUEUE_CAPACITY",
    "HOOK_BUSY_TIMEOUT",
    "MAX_CLAIM_SECONDS",
    "SCHEMA_VERSION",
    "STATEMENT_NAMES",
    "Claim",
    "HookStore",
    "RelayStore",
    "StoreError",
    "StoredReceipt",
    "default_store_path",
]

DEFAULT_QUEUE_CAPACITY = 20
DEFAULT_IDENTITY_LIMIT = 2_000
#: How long a hook process waits for a locked store before it gives up (seconds).
HOOK_BUSY_TIMEOUT = 1.0
#: How long ``instruct`` and the other commands wait for a locked store (seconds).
DEFAULT_BUSY_TIMEOUT = 5.0
#: A claim older than this is finalised ``unknown`` even if its process still runs: no
#: vendor lets a hook run that long (their defaults are 30 to 600 seconds).
MAX_CLAIM_SECONDS = 900.0
STORE_ENV = "LIVE_STEERING_STORE"

#: The layout both engines create and migrate to. Version 2 added the meta table that
#: records it (SQLite; PostgreSQL had one) and an index of the open claims, which a
#: store-wide ``recover`` reads instead of every instruction. Version 3 added each
#: instruction's ``kind`` (``steer`` or ``follow_up``) and target ``agent`` (a subagent's id;
#: NULL: the session's main agent). Version 4 added the ``agents`` table: each subagent whose
#: hooks ran, by session (the ids ``instruct --agent`` takes).
SCHEMA_VERSION = 4

QUEUED = "queued"
DELIVERING = "delivering"
DELIVERED = "delivered"
DROPPED = "dropped"
UNKNOWN = "unknown"
STATES = (QUEUED, DELIVERING, DELIVERED, DROPPED, UNKNOWN)
#: The kinds of instruction (C29): a steer rides the next context moment; a follow-up only a
#: vendor's follow-up moment (its "do not stop yet" reply, Claude Code's ``Stop``).
STEER = "steer"
FOLLOW_UP = "follow_up"
KINDS = (STEER, FOLLOW_UP)
#: What a host reads as the disposition of each state (the receipt's vocabulary, C4).
DISPOSITION_OF = {
    QUEUED: "queued",
    DELIVERING: "queued",
    DELIVERED: "applied",
    DROPPED: "held",
    UNKNOWN: "unknown",
}
REDACTED = "[redacted]"

#: The dialect: every statement the queue runs, by name. Each engine spells each one
#: (``tests/test_hooks_stores.py`` checks they spell exactly these); their columns are
#: what the comments say, in that order.
STATEMENT_NAMES = frozenset(
    {
        "read_version",  # -> value (text) | no row; the meta table may be missing on SQLite
        "write_version",  # (version text)
        "session",  # (session_id) -> vendor, ended, epoch
        "insert_session",  # (session_id, vendor, now)
        "name_session_vendor",  # (vendor, session_id): the first vendor named for it
        "change_session_vendor",  # (vendor, now, session_id)
        "revendor_queued",  # (vendor, session_id)
        "reopen_session",  # (epoch, now, session_id)
        "end_session",  # (now, session_id)
        "hook_seen",  # (session_id) -> a row when a hook of the session was recorded (an x.* event)
        "agent_seen",  # (session_id, agent_id) -> a row when a hook of that subagent ran
        "insert_agent",  # (session_id, agent_id, now): a subagent's first hook moment
        "agents",  # () -> session_id, agent_id, in the order they were first seen
        "any_live",  # (session_id) -> a row when anything is queued or delivering
        "open_claims",  # () -> arrival, session_id, command_id, vendor, claimant, claimed_at
        "open_claims_of_session",  # (session_id) -> as open_claims
        "lose",  # (now, arrival)
        "identity",  # (session_id, command_id) -> text, state, reason, kind, agent
        "counts",  # (session_id) -> command ids held, instructions undelivered
        "insert_instruction",  # (session_id, command_id, text, vendor, epoch, now, kind, agent)
        "receipt",  # (session_id, command_id) -> state, reason
        "queued_head",  # (session_id, limit) -> arrival, command_id, text, enqueued_at, kind, agent
        "deliver",  # (token, pid, now, moment, vendor, arrival)
        "drop_over_cap",  # (now, moment, arrival)
        "queued_all",  # (session_id) -> arrival, command_id, enqueued_at
        "drop_ended",  # (now, moment, arrival)
        "claimed",  # (token) -> arrival, command_id, enqueued_at
        "finish",  # (state, reason, now, arrival)
        "emit",  # (type, session_id, command_id, time, fields)
        "events",  # (after, limit) -> sequence, type, session_id, time, fields, text
        "events_of_session",  # (after, session_id, limit) -> as events
        "instructions",  # () -> arrival, session_id, command_id, state, reason, epoch, vendor
        "instructions_of_session",  # (session_id) -> as instructions
        "sessions",  # () -> session_id, vendor, epoch, ended, queued, last event time, a hook ran
    }
)


class StoreError(LiveSteeringError):
    """The store cannot be opened or used (locked past the bounded wait, damaged, unwritable,
    or of a schema version this library does not know)."""


def default_store_path() -> str:
    """``$LIVE_STEERING_STORE``, else ``$XDG_STATE_HOME/live-steering/hooks.db``.

    ``XDG_STATE_HOME`` defaults to ``~/.local/state`` (the XDG base-directory spec).
    """
    explicit = os.environ.get(STORE_ENV)
    if explicit:
        return explicit
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "live-steering", "hooks.db")


class StoredReceipt:
    """The answer to ``enqueue`` or ``receipt``: accepted or refused, and the current state."""

    __slots__ = ("accepted", "command_id", "detail", "reason", "repeated", "session_id", "state")

    def __init__(
        self,
        accepted: bool,
        command_id: str,
        session_id: str,
        state: str | None,
        reason: str | None = None,
        detail: str | None = None,
        repeated: bool = False,
    ) -> None:
        self.accepted = accepted
        self.command_id = command_id
        self.session_id = session_id
        self.state = state
        self.reason = reason
        self.detail = detail
        self.repeated = repeated

    @property
    def disposition(self) -> str | None:
        """``queued``, ``applied``, ``held`` or ``unknown``; ``None`` when refused."""
        return None if self.state is None else DISPOSITION_OF[self.state]

    def to_dict(self) -> dict[str, object]:
        """The wire shape, as ``InstructionReceipt.to_dict`` (for callers that must not import it)."""
        wire: dict[str, object] = {
            "accepted": self.accepted,
            "commandId": self.command_id,
            "sessionId": self.session_id,
            "disposition": self.disposition,
        }
        if self.reason is not None:
            wire["reason"] = self.reason
        return wire

    def __repr__(self) -> str:
        return (
            f"StoredReceipt(accepted={self.accepted!r}, command_id={self.command_id!r}, "
            f"state={self.state!r}, reason={self.reason!r})"
        )


class Claim:
    """What one hook moment took from the store, and the reply that carries it."""

    __slots__ = (
        "agent_id",
        "delivered",
        "dropped",
        "follow_ups",
        "moment",
        "recovered",
        "reply",
        "session_id",
        "skipped",
        "token",
        "vendor",
    )

    def __init__(
        self,
        token: str,
        vendor: str,
        session_id: str,
        moment: str,
        *,
        reply: dict[str, object] | None = None,
        delivered: tuple[str, ...] = (),
        dropped: tuple[str, ...] = (),
        skipped: str | None = None,
        recovered: tuple[str, ...] = (),
        agent_id: str | None = None,
        follow_ups: tuple[str, ...] = (),
    ) -> None:
        self.agent_id = agent_id
        """The subagent the moment ran in (``None``: the main agent)."""
        self.follow_ups = follow_ups
        """The command ids of ``delivered`` that are follow-ups."""
        self.token = token
        self.vendor = vendor
        self.session_id = session_id
        self.moment = moment
        self.reply = reply
        """The vendor's JSON reply, or ``None``: reply as if there were nothing to say."""
        self.delivered = delivered
        """Command ids now ``delivering``, in arrival order; ``confirm`` makes them ``delivered``."""
        self.dropped = dropped
        """Command ids dropped at this (session-end) moment."""
        self.skipped = skipped
        """Why nothing was attached (a ``SkipReason`` value), when nothing was."""
        self.recovered = recovered
        """Command ids a dead claimant had left ``delivering``, finalised ``unknown`` now."""

    def __repr__(self) -> str:
        return f"Claim({self.vendor!r}, {self.session_id!r}, {self.moment!r}, delivered={self.delivered!r})"


class HookStore(abc.ABC):
    """What the relay needs from a store. Every method is one atomic step; see the module docs."""

    @abc.abstractmethod
    def enqueue(
        self,
        session_id: str,
        command_id: str,
        text: str,
        *,
        vendor: str | None = None,
        kind: str = STEER,
        agent_id: str | None = None,
        resume: bool = False,
    ) -> StoredReceipt:
        """Queue one instruction, or refuse it (a pinned reason; only the audit stream changes)."""

    @abc.abstractmethod
    def claim(
        self,
        vendor: str,
        session_id: str,
        moment: str,
        *,
        reply_would_be_empty: bool = True,
        agent_id: str | None = None,
    ) -> Claim:
        """Decide one hook moment: claim what it carries, or drop the queue at a session end."""

    @abc.abstractmethod
    def confirm(self, claim: Claim) -> None:
        """The claim's reply was written out and flushed: its instructions are ``delivered``."""

    @abc.abstractmethod
    def abandon(self, claim: Claim, reason: str) -> None:
        """Writing the claim's reply failed part-way: its instructions are ``unknown``."""

    @abc.abstractmethod
    def record_failure(
        self, vendor: str | None, reason: str, detail: str, *, session_id: str | None = None
    ) -> None:
        """Audit a failure of the hook command itself (bad input, an error of its own)."""

    @abc.abstractmethod
    def recover(self, *, session_id: str | None = None) -> list[str]:
        """Finalise ``unknown`` every claim whose claimant is dead; returns their command ids."""

    @abc.abstractmethod
    def receipt(self, session_id: str, command_id: str) -> StoredReceipt | None:
        """The current receipt of an accepted command id, or ``None``."""

    @abc.abstractmethod
    def events(
        self, *, after: int = 0, session_id: str | None = None, limit: int = 1_000, show_text: bool = False
    ) -> list[dict[str, object]]:
        """Audit events with ``sequence > after``, oldest first; text ``[redacted]`` unless ``show_text``."""

    @abc.abstractmethod
    def instructions(self, session_id: str | None = None) -> list[dict[str, object]]:
        """Every instruction row (command id, state, reason, epoch), in arrival order."""

    @abc.abstractmethod
    def sessions(self) -> list[dict[str, object]]:
        """Every session the store knows (id, vendor, epoch, ended, queued count, last event time,
        whether a hook of it ever ran, its subagents' ids)."""

    def seen(self, session_id: str) -> bool:
        """True once a hook moment of ``session_id`` has been recorded; a store that cannot tell: True."""
        return True

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store's resources. Idempotent."""

    def __enter__(self) -> HookStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kind_problem(kind: str, vendors: list[_vendors.VendorFacts], agent_id: str | None = None) -> str | None:
    """Why ``kind`` cannot be carried for a session of ``vendors``, or ``None`` (a detail only:
    the reason is ``_admit.decide``'s, from ``kind_ok``)."""
    if kind == STEER:
        if agent_id is not None:
            blind = [v.title for v in vendors if not v.agent_id_fields]
            if blind:  # its hooks never say which agent runs them: nothing would ever claim it
                return f"{' and '.join(blind)} hooks do not say which subagent runs them (--agent)"
        return None
    if kind == FOLLOW_UP:
        if agent_id is not None:
            # The follow-up moment (Claude Code's Stop) is the main agent's; no claim of a
            # subagent's hook takes a follow-up, so one queued for it would wait for nothing.
            return (
                "a follow-up rides the main agent's 'do not stop yet' reply; "
                "a subagent (--agent) has none here"
            )
        return _vendors.follow_up_problem(vendors)
    shown = kind if isinstance(kind, str) and kind.isprintable() else ascii(kind)
    return f"an instruction is a {STEER!r} or a {FOLLOW_UP!r}, not {shown[:50]!r}"


def _delivery_fields(moment: str, agent_id: str | None, follow_up: bool) -> dict[str, object]:
    """The fields of a ``delivering``/``delivered`` event: where, which agent took it (``None``:
    the main agent), and ``delivery: "follow_up"`` for a follow-up (C29)."""
    fields: dict[str, object] = {"moment": moment, "agent_id": agent_id}
    if follow_up:
        fields["delivery"] = FOLLOW_UP
    return fields


def _queued_ms(now: float, enqueued_at: float) -> int:
    return max(0, round((now - enqueued_at) * 1000))


def _newer_schema(where: str, version: int) -> StoreError:
    """The error for a store written by a newer library (it is never touched)."""
    return StoreError(
        f"{where}: hook store schema version {version} is newer than this library's "
        f"{SCHEMA_VERSION}: upgrade live-steering"
    )


class RelayStore(HookStore):
    """The queue, on an engine's dialect: every decision of the store, made once for both engines.

    An engine subclass sets ``path`` (where, for messages), ``capacity``,
    ``identity_limit`` and ``_trace``, spells ``STATEMENTS`` (every name of
    ``STATEMENT_NAMES``), ``SCHEMA`` (today's layout) and ``MIGRATIONS`` (version ->
    the statements that make it from the version before), and provides the methods
    marked abstract below. It calls ``_prepare()`` once connected.
    """

    path: str
    capacity: int
    identity_limit: int
    _trace: Callable[[str], None] | None
    STATEMENTS: Mapping[str, str]
    SCHEMA: tuple[str, ...]
    MIGRATIONS: Mapping[int, tuple[str, ...]]

    # -- the dialect ------------------------------------------------------------------------

    @abc.abstractmethod
    def _run(self, name: str, params: Sequence[object] = ()) -> Rows:
        """Run the named statement (``STATEMENTS[name]``) with ``params``; engine errors are
        ``StoreError`` (a value the engine cannot store is a ``ValueError``)."""

    @abc.abstractmethod
    def _execute(self, sql: str) -> None:
        """Run one schema statement of ``SCHEMA`` or ``MIGRATIONS`` (no parameters)."""

    @abc.abstractmethod
    def _transaction(self, session_id: str | None = None) -> AbstractContextManager[None]:
        """One atomic step, serialised with every other step of ``session_id`` (or of the
        store). Calls ``_point("before-commit")`` before it commits."""

    @abc.abstractmethod
    def _schema_transaction(self) -> AbstractContextManager[None]:
        """The one transaction that creates or migrates the schema, serialised store-wide."""

    @abc.abstractmethod
    def _read_version(self) -> int:
        """The stored schema version; 0 for an empty store."""

    @abc.abstractmethod
    def _new_token(self) -> str:
        """A claim token naming this claimant (for recovery) and this claim."""

    @abc.abstractmethod
    def _claimant_alive(self, claimant: object) -> bool:
        """Whether the claimant ``open_claims`` names (its ``claimant`` column) still lives."""

    def _point(self, name: str) -> None:
        if self._trace is not None:
            self._trace(name)

    # -- schema -----------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Create the schema (an empty store), migrate it (an older one) or refuse it (a newer
        one); one read when it is current, the common case."""
        version = self._read_version()
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise _newer_schema(self.path, version)
        with self._schema_transaction():
            version = self._read_version()  # another process may have done it meanwhile
            if version == SCHEMA_VERSION:
                return
            if version > SCHEMA_VERSION:
                raise _newer_schema(self.path, version)
            steps = (
                [self.SCHEMA]
                if version == 0
                else [self.MIGRATIONS[v] for v in range(version + 1, SCHEMA_VERSION + 1)]
            )
            for statements in steps:
                for statement in statements:
                    self._execute(statement)
            self._run("write_version", (str(SCHEMA_VERSION),))

    def _emit(
        self,
        type_: str,
        session_id: str | None,
        now: float,
        fields: dict[str, object],
        command_id: str | None = None,
    ) -> None:
        if command_id is not None:
            fields = {"command_id": command_id, "cause": command_id, **fields}
        self._run("emit", (type_, session_id, command_id, now, json.dumps(fields, ensure_ascii=False)))

    # -- recovery ---------------------------------------------------------------------------

    def _recover(self, now: float, session_id: str | None) -> list[str]:
        """Inside a transaction: finalise ``unknown`` the claims of dead or stale claimants."""
        if session_id is None:
            rows = self._run("open_claims").fetchall()
        else:
            rows = self._run("open_claims_of_session", (session_id,)).fetchall()
        recovered = []
        for arrival, sid, command_id, vendor, claimant, claimed_at in rows:
            stale = now - (claimed_at or 0.0) > MAX_CLAIM_SECONDS
            if not stale and self._claimant_alive(claimant):
                continue
            # A dead claimant's instruction: ``unknown (hook-lost)``, audited (C26b).
            self._run("lose", (now, arrival))
            prefix = f"x.{vendor}." if vendor else ""
            self._emit(prefix + "instruction.unknown", sid, now, {"reason": "hook-lost"}, command_id)
            recovered.append(command_id)
        return recovered

    def recover(self, *, session_id: str | None = None) -> list[str]:
        """Finalise ``unknown`` every claim whose claimant is dead; returns their command ids.

        Store-wide, each session with open claims is recovered in a step of its own, under that
        session's lock like every other step of it: a session's events then commit in the order
        of their sequence numbers, so a feed that reads them by sequence (``serve``'s event
        stream) never moves past one that commits later.
        """
        if session_id is not None:
            with self._transaction(session_id):
                return self._recover(time.time(), session_id)
        sessions = dict.fromkeys(str(row[1]) for row in self._run("open_claims").fetchall())
        recovered: list[str] = []
        for sid in sessions:
            recovered += self.recover(session_id=sid)
        return recovered

    # -- admission --------------------------------------------------------------------------

    def enqueue(
        self,
        session_id: str,
        command_id: str,
        text: str,
        *,
        vendor: str | None = None,
        kind: str = STEER,
        agent_id: str | None = None,
        resume: bool = False,
    ) -> StoredReceipt:
        """Queue one instruction for the next eligible hook moment of ``session_id``.

        ``kind``: ``steer`` (the next context moment) or ``follow_up`` (the vendor's
        follow-up moment only; ``unsupported-kind`` unless every vendor known for the
        session has one, and at least one is known). ``agent_id``: the subagent it is for
        (``None``: the session's main agent; a hook running in a subagent never takes it).
        ``resume``: when the session has ended, queue the instruction for its next run
        instead of refusing ``session-ended``: it waits ``queued`` until the vendor opens the
        session again (``--resume``: the moment that reopens it, which for Hermes is the
        first turn's ``pre_llm_call``) and is delivered at that run's first eligible moment,
        or dropped at that run's end like anything else queued then. A session never
        resumed keeps it ``queued``. The accepted event says ``"resume": true``.

        A session id outside the runtime's id rules is a ``ValueError`` (as for
        ``HookSession``). Refusals (pinned reasons, in ``_admit.decide``'s order, as
        ``HookSession.enqueue``): ``session-ended``, ``invalid-input``,
        ``identity-conflict``, ``queue-full`` (20 undelivered), ``capacity`` (2,000
        command ids in the session). An identical repeat returns the current state and
        admits nothing, even after the session ended.
        """
        facts = _vendors.FACTS.get(vendor) if vendor is not None else None
        if vendor is not None and facts is None:
            raise ValueError(f"unknown vendor {vendor!r}; expected one of {sorted(_vendors.FACTS)}")
        if (problem := _vendors.session_id_problem(session_id)) is not None:
            # not a refusal receipt: the audit stream could not even name such a session
            raise ValueError(f"session_id refused: {problem}")
        if agent_id is not None and (problem := _vendors.agent_id_problem(agent_id)) is not None:
            raise ValueError(f"agent_id refused: {problem}")
        now = time.time()
        with self._transaction(session_id):
            self._point("enqueue")
            self._recover(now, session_id)
            row = self._run("session", (session_id,)).fetchone()
            # The strictest of every vendor this session may meet: the one named here and the
            # one its hooks ran as; neither known: text every vendor can carry.
            limits = [f for f in (facts, _vendors.FACTS.get(row[0]) if row else None) if f is not None]
            problem = _vendors.command_id_problem(command_id)
            # an invalid id was never accepted (and an engine may not even look it up)
            known = (
                None if problem is not None else self._run("identity", (session_id, command_id)).fetchone()
            )
            if problem is None:
                problem = _vendors.admission_problem(text, limits or [_vendors.STRICTEST])
            held, pending = self._run("counts", (session_id,)).fetchone()
            kind_problem = _kind_problem(kind, limits, agent_id)
            ended = row is not None and bool(row[1])
            answer = _admit.decide(
                kind_ok=kind_problem is None,
                ended=ended and not resume,
                known=known is not None,
                # one input whatever its kind (C10, C29): the same id is the same text, kind and agent
                same=known is not None and (known[0], known[3], known[4]) == (text, kind, agent_id),
                problem=problem,
                queue_full=pending >= self.capacity,
                full=held >= self.identity_limit,
            )
            if known is not None and answer == _admit.REPEAT:
                self._emit("control.repeated", session_id, now, {"state": known[1]}, command_id)
                return StoredReceipt(True, command_id, session_id, known[1], known[2], repeated=True)
            if answer != _admit.ADMIT:
                why = kind_problem if answer == _admit.UNSUPPORTED_KIND else problem
                detail = _admit.detail(answer, why, self.capacity)
                return self._refuse(now, session_id, command_id, answer, detail)
            if row is None:
                self._run("insert_session", (session_id, vendor, now))
                epoch = 1
            else:
                if vendor is not None and row[0] is None:
                    self._run("name_session_vendor", (vendor, session_id))
                epoch = row[2] + 1 if ended else row[2]  # ended: for the run that reopens it
            row_values = (session_id, command_id, text, vendor, epoch, now, kind, agent_id)
            self._run("insert_instruction", row_values)
            fields: dict[str, object] = {"pending": pending + 1}
            if vendor is not None:
                fields["vendor"] = vendor
            if kind != STEER:
                fields["kind"] = kind
            if agent_id is not None:
                fields["agent_id"] = agent_id
            if ended:
                fields["resume"] = True
            self._emit("control.accepted", session_id, now, fields, command_id)
            return StoredReceipt(True, command_id, session_id, QUEUED)

    def _refuse(
        self, now: float, session_id: str, command_id: str, reason: str, detail: str
    ) -> StoredReceipt:
        safe_id = command_id if _vendors.command_id_problem(command_id) is None else None
        fields: dict[str, object] = {"reason": reason, "detail": detail}
        if safe_id is None:
            fields["command_id"] = None
        self._emit("control.rejected", session_id, now, fields, safe_id)
        return StoredReceipt(False, command_id, session_id, None, reason, detail)

    def receipt(self, session_id: str, command_id: str) -> StoredReceipt | None:
        """The current receipt of an accepted command id, or ``None``. Read-only."""
        row = self._run("receipt", (session_id, command_id)).fetchone()
        return None if row is None else StoredReceipt(True, command_id, session_id, row[0], row[1])

    # -- hook moments -----------------------------------------------------------------------

    def _nothing_to_do(
        self, facts: _vendors.VendorFacts, session_id: str, moment: str, agent_id: str | None
    ) -> bool:
        """True when a read alone proves this moment changes nothing (the common case)."""
        if moment == facts.session_end_moment:
            return False
        row = self._run("session", (session_id,)).fetchone()
        if row is None or row[0] != facts.name or (row[1] and moment in facts.reopen_moments):
            return False
        if agent_id is not None and self._run("agent_seen", (session_id, agent_id)).fetchone() is None:
            return False  # a subagent's first moment: recorded, so a host can name it (--agent)
        return self._run("any_live", (session_id,)).fetchone() is None

    def claim(
        self,
        vendor: str,
        session_id: str,
        moment: str,
        *,
        reply_would_be_empty: bool = True,
        agent_id: str | None = None,
    ) -> Claim:
        """Decide one hook moment of ``vendor`` for ``session_id``; see the module docs. O(claimed).

        ``agent_id``: the subagent the moment runs in (``None``: the main agent); it takes only
        instructions sent to that agent. At a follow-up moment of the main agent (the ``Stop`` of
        Claude Code, Codex, Qwen Code) steers and follow-ups ride the vendor's "do not stop yet"
        reply; elsewhere only steers ride.
        """
        facts = _vendors.FACTS[vendor]
        token = self._new_token()
        if self._nothing_to_do(facts, session_id, moment, agent_id):
            carrying = facts.eligible_moments(agent_id)
            eligible = _vendors.ineligibility(
                carrying,
                facts.held_moments,
                facts.unconsumed_moments - carrying,
                moment,
                reply_would_be_empty,
            )
            return Claim(token, vendor, session_id, moment, skipped=eligible or _vendors.NOTHING_QUEUED)
        now = time.time()
        prefix = f"x.{vendor}."
        with self._transaction(session_id):
            self._point("claim")
            row = self._run("session", (session_id,)).fetchone()
            # A hook of a session the audit stream has no hook event of yet: unless this claim
            # delivers (its own events say so), record that the session is real (``seen``), so
            # ``instruct`` can tell a typo from a session.
            unseen = row is None or self._run("hook_seen", (session_id,)).fetchone() is None
            if unseen and row is None:
                self._emit(prefix + "session.seen", session_id, now, {"moment": moment})
                unseen = False
            if row is None:
                self._run("insert_session", (session_id, vendor, now))
                ended, epoch = 0, 1
            else:
                ended, epoch = row[1], row[2]
                if row[0] != vendor:
                    self._run("change_session_vendor", (vendor, now, session_id))
                    self._run("revendor_queued", (vendor, session_id))
                    if row[0] is not None:  # a hook of another vendor for a known session: say so
                        self._emit(
                            prefix + "session.vendor-changed",
                            session_id,
                            now,
                            {"previous": row[0], "moment": moment},
                        )
            if agent_id is not None and self._run("agent_seen", (session_id, agent_id)).fetchone() is None:
                self._run("insert_agent", (session_id, agent_id, now))
                self._emit(prefix + "agent.seen", session_id, now, {"agent_id": agent_id, "moment": moment})
                unseen = False
            if ended and moment in facts.reopen_moments:
                epoch += 1
                ended = 0
                self._run("reopen_session", (epoch, now, session_id))
                self._emit(prefix + "session.resumed", session_id, now, {"epoch": epoch, "moment": moment})
            recovered = tuple(self._recover(now, session_id))
            if ended:
                return Claim(
                    token, vendor, session_id, moment, skipped=_vendors.SESSION_ENDED, recovered=recovered
                )
            if moment == facts.session_end_moment:
                dropped = self._drop_queued(now, vendor, session_id, moment)
                self._run("end_session", (now, session_id))
                self._emit(prefix + "session.ended", session_id, now, {"epoch": epoch, "moment": moment})
                return Claim(
                    token,
                    vendor,
                    session_id,
                    moment,
                    dropped=dropped,
                    skipped=_vendors.SESSION_ENDED,
                    recovered=recovered,
                )
            carrying = facts.eligible_moments(agent_id)
            skip = _vendors.ineligibility(
                carrying,
                facts.held_moments,
                facts.unconsumed_moments - carrying,  # a block decision is read where context is not
                moment,
                reply_would_be_empty,
            )
            if skip is not None:
                if unseen:
                    self._emit(prefix + "session.seen", session_id, now, {"moment": moment})
                return Claim(token, vendor, session_id, moment, skipped=skip, recovered=recovered)
            keep_going = agent_id is None and moment in facts.follow_up_moments
            rows = self._run("queued_head", (session_id, self.capacity)).fetchall()
            # this agent's own, in arrival order; follow-ups wait for the main agent's stop
            queued = [
                (r[0], r[1], r[2], r[3]) for r in rows if r[5] == agent_id and (r[4] == STEER or keep_going)
            ]
            kinds = {r[1]: r[4] for r in rows}
            if facts.cap is not None and any(_vendors.over_cap(r[2], facts) for r in queued):
                queued = self._drop_over_cap(now, facts, session_id, moment, queued)
            count = _vendors.fit_count(
                (_vendors.measure(r[2], facts.cap_counts_utf16, facts.cap_counts_utf8) for r in queued),
                facts.cap,
            )
            if count == 0:
                if unseen:
                    self._emit(prefix + "session.seen", session_id, now, {"moment": moment})
                return Claim(
                    token, vendor, session_id, moment, skipped=_vendors.NOTHING_QUEUED, recovered=recovered
                )
            batch = queued[:count]
            follow_ups = tuple(r[1] for r in batch if kinds.get(r[1]) == FOLLOW_UP)
            for arrival, command_id, _, _ in batch:
                self._run("deliver", (token, os.getpid(), now, moment, vendor, arrival))
                self._emit(
                    prefix + "instruction.delivering",
                    session_id,
                    now,
                    _delivery_fields(moment, agent_id, command_id in follow_ups),
                    command_id,
                )
            context = _vendors.SEPARATOR.join(r[2] for r in batch)
            reply = _vendors.build_reply(
                facts.reply_shape,
                moment,
                context,
                keep_going=keep_going,
                follow_up_reply=facts.follow_up_reply,
            )
        self._point("claimed")
        return Claim(
            token,
            vendor,
            session_id,
            moment,
            reply=reply,
            delivered=tuple(r[1] for r in batch),
            recovered=recovered,
            agent_id=agent_id,
            follow_ups=follow_ups,
        )

    def _drop_over_cap(
        self,
        now: float,
        facts: _vendors.VendorFacts,
        session_id: str,
        moment: str,
        queued: list[tuple[int, str, str, float]],
    ) -> list[tuple[int, str, str, float]]:
        """Inside a claim: drop (audited) each queued text this vendor's reply can never carry.

        Admission checks every vendor known for the session, but a session can meet a
        stricter vendor later (its first hook, or a hook of another vendor). Such a text
        would block the FIFO queue forever; it is finalised ``dropped {reason: "over-cap"}``
        instead, and the rest of the queue moves on.
        """
        kept = []
        unit = _vendors.cap_unit(facts.cap_counts_utf16, facts.cap_counts_utf8)
        for arrival, command_id, text, enqueued_at in queued:
            if not _vendors.over_cap(text, facts):
                kept.append((arrival, command_id, text, enqueued_at))
                continue
            self._run("drop_over_cap", (now, moment, arrival))
            size = _vendors.measure(text, facts.cap_counts_utf16, facts.cap_counts_utf8)
            self._emit(
                f"x.{facts.name}.instruction.dropped",
                session_id,
                now,
                {
                    "reason": "over-cap",
                    "detail": f"{size:,} {unit}, over {facts.title}'s cap of {facts.cap:,}",
                    "moment": moment,
                    "queued_ms": _queued_ms(now, enqueued_at),
                },
                command_id,
            )
        return kept

    def _drop_queued(self, now: float, vendor: str, session_id: str, moment: str) -> tuple[str, ...]:
        rows = self._run("queued_all", (session_id,)).fetchall()
        for arrival, command_id, enqueued_at in rows:
            self._run("drop_ended", (now, moment, arrival))
            self._emit(
                f"x.{vendor}.instruction.dropped",
                session_id,
                now,
                {"reason": "session-ended", "moment": moment, "queued_ms": _queued_ms(now, enqueued_at)},
                command_id,
            )
        return tuple(r[1] for r in rows)

    def _finish(self, claim: Claim, state: str, reason: str | None) -> None:
        if not claim.delivered:
            return
        now = time.time()
        with self._transaction(claim.session_id):
            self._point("finish")
            rows = self._run("claimed", (claim.token,)).fetchall()
            for arrival, command_id, enqueued_at in rows:
                self._run("finish", (state, reason, now, arrival))
                fields = _delivery_fields(claim.moment, claim.agent_id, command_id in claim.follow_ups)
                fields["queued_ms"] = _queued_ms(now, enqueued_at)
                if reason is not None:
                    fields["reason"] = reason
                self._emit(f"x.{claim.vendor}.instruction.{state}", claim.session_id, now, fields, command_id)

    def confirm(self, claim: Claim) -> None:
        """The reply was written and flushed: ``delivering -> delivered`` (``{queued_ms}`` audited)."""
        self._finish(claim, DELIVERED, None)

    def abandon(self, claim: Claim, reason: str) -> None:
        """The reply could not be written out whole: ``delivering -> unknown``."""
        self._finish(claim, UNKNOWN, reason)

    def record_failure(
        self, vendor: str | None, reason: str, detail: str, *, session_id: str | None = None
    ) -> None:
        """Audit a failure of the hook command (``hook.failed {reason, detail}``)."""
        prefix = f"x.{vendor}." if vendor in _vendors.FACTS else ""
        fields: dict[str, object] = {"reason": reason, "detail": detail[:500]}
        if vendor is not None and not prefix:
            fields["vendor"] = vendor[:100]
        with self._transaction(session_id):  # the session's lock, as for its other events
            self._emit(prefix + "hook.failed", session_id, time.time(), fields)

    # -- reading ----------------------------------------------------------------------------

    def events(
        self, *, after: int = 0, session_id: str | None = None, limit: int = 1_000, show_text: bool = False
    ) -> list[dict[str, object]]:
        """Audit events with ``sequence > after``, oldest first, in the C21 envelope.

        Each is ``{"type", "sequence", "session_id", "time", ...fields}``. Events about
        an instruction carry ``"text": "[redacted]"`` unless ``show_text``. Read-only.
        """
        if session_id is None:
            rows = self._run("events", (after, limit))
        else:
            rows = self._run("events_of_session", (after, session_id, limit))
        out: list[dict[str, object]] = []
        for sequence, type_, sid, at, fields, text in rows:
            event: dict[str, object] = {"type": type_, "sequence": sequence, "session_id": sid, "time": at}
            event.update(json.loads(fields))
            if text is not None and not type_.endswith("rejected"):
                event["text"] = text if show_text else REDACTED
            out.append(event)
        return out

    def instructions(self, session_id: str | None = None) -> list[dict[str, object]]:
        """Every instruction row, in arrival order (for inspection and tests). Read-only."""
        if session_id is None:
            rows = self._run("instructions")
        else:
            rows = self._run("instructions_of_session", (session_id,))
        keys = ("arrival", "session_id", "command_id", "state", "reason", "epoch", "vendor")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def seen(self, session_id: str) -> bool:
        """True once a hook moment of ``session_id`` has been recorded (``x.VENDOR.session.seen``). O(1)."""
        return self._run("hook_seen", (session_id,)).fetchone() is not None

    def sessions(self) -> list[dict[str, object]]:
        """Every session the store knows: id, vendor, epoch, ended, queued count, last event time,
        ``seen``: whether a hook of it ever ran (``False`` for an id only ``instruct`` named,
        perhaps a typo), and ``agents``: the ids of its subagents whose hooks ran, in the order
        first seen (the ids ``instruct --agent`` takes)."""
        rows = self._run("sessions").fetchall()
        agents: dict[str, list[str]] = {}
        for session_id, agent_id in self._run("agents").fetchall():
            agents.setdefault(session_id, []).append(agent_id)
        keys = ("session_id", "vendor", "epoch", "ended", "queued", "last_event", "seen", "agents")
        return [
            dict(
                zip(
                    keys,
                    (r[0], r[1], r[2], bool(r[3]), r[4], r[5], bool(r[6]), agents.get(r[0], [])),
                    strict=True,
                )
            )
            for r in rows
        ]
