"""The fleet's storage: one schema, one set of statements, two engines (SQLite and PostgreSQL).

Everything here is synchronous and runs on a worker thread, one call at a time per
connection, except the ``*_async`` forms of the three transactions on a remote submit's
path, which an engine may run from the event loop (PostgreSQL always, SQLite when its
write lock is free at once). ``StoreConnection`` writes every statement the fleet runs,
once, with ``?`` placeholders. The engines differ in two narrow places only, and never
rewrite a statement beyond their driver's placeholder style:

* ``Dialect``, a frozen value each engine's connection class names (``dialect``): the
  fragments the shared statements splice in, and nothing else (the serial key type,
  the row locks a statement appends, the store's clock in SQL, a wake-up inside an
  insert, the lock that serialises schema changes);
* the methods each engine implements (``execute``, ``begin``, ``commit``, ``now``, the
  liveness lock, ``notify``): how a transaction begins and locks (SQLite:
  ``BEGIN IMMEDIATE``), how a dead owner is detected at once (SQLite: an ``flock`` beside
  the file; PostgreSQL: a session advisory lock), how a wake-up travels (SQLite: a
  datagram after the commit; PostgreSQL: ``pg_notify`` inside the transaction).

Truth is only ever in the tables: a lost wake-up costs latency, never an answer. The
schema evolves through ``MIGRATIONS``, applied in order in one transaction by the first
node that opens an older store (``ensure_schema``); a newer store is refused.

This module decides nothing about inputs. It stores requests, fences every owner
write by the lease's epoch, writes what an owner's core decided, and finalises what a
dead owner left ``queued`` by C23's rules (never marked -> ``held``, marked ->
``unknown``, both ``runtime-lost``).
"""

from __future__ import annotations

import abc
import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Final

import anyio
import anyio.to_thread
import attrs

from .. import _admission as admission
from .._admission import content_digest
from .._errors import LiveSteeringError, RuntimeClosedError
from .._rules import DEFAULT_MAX_TEXT_CHARS, KINDS
from .._types import Disposition, HoldReason, Input, Receipt
from .._validate import input_problem, utf8_encodable
from ..journal import ChangeKind, JournalChange, JournalEntry

#: The pinned refusal reason of C28: the owner did not decide before the host's deadline.
UNREACHABLE: Final = "unreachable"


#: A remote stop's refusals: no live owner holds the session's lease; the owner's runtime did
#: not stop it (``runtime.stop`` returned False: not the running generation, or already ending).
NO_OWNER: Final = "no-owner"
NOT_RUNNING: Final = "not-running"


class FleetError(LiveSteeringError, RuntimeError):
    """The fleet store cannot do what was asked (unreachable database, bad schema, closed fleet)."""


class FencedError(FleetError):
    """This owner's lease was taken over: it may write nothing more (C28)."""


class OwnerLostError(FleetError, RuntimeClosedError):
    """This node's owner of the session failed (its lease was taken over: ``FencedError`` is the
    cause; or its store was lost) and closed its runtime: the one error its engine's loop gets
    from then on, from ``gen.boundary()``, ``gen.wait_for_input()``, the write barrier and a new
    ``open_generation``, so every loop ends loudly. A ``RuntimeClosedError`` too: code that
    handles a closed runtime keeps working."""


class LeaseHeldError(FleetError):
    """Another live node owns the session's lease."""


@attrs.frozen
class Lease:
    """The lease row of one session, as read back."""

    session_id: str
    node_id: str | None
    """The owning node; ``None`` when the lease is free (released or recovered)."""
    epoch: int
    """Bumped by every take: an owner's writes are fenced by it."""
    expires_at: float
    """Seconds since the epoch (the database's clock), renewed by the owner every TTL/3."""
    generation_id: str | None
    """The generation the owner runs now, or ``None``."""
    live: bool
    """Held and not expired (a dead owner may still look live until probed or expired)."""
    steering_mode: str | None = None
    """The owning runtime's ``steering_mode`` (C30: ``"all"`` or ``"one-at-a-time"``), recorded
    when it took the lease; ``None`` when the lease is free, or was taken by a node of a library
    older than schema version 3 (it records none)."""
    follow_up_mode: str | None = None
    """The owning runtime's ``follow_up_mode`` (C30), recorded alike."""
    delivery: str | None = None
    """The owning runtime's capability ``mode`` (C1) when it took the lease: ``"request_boundary"``,
    or ``"unavailable"`` (made with ``boundary_delivery=False``: its boundaries deliver no steer);
    ``None`` when the lease is free, or was taken by a node older than schema version 4."""


def delivers(lease: Lease | None) -> bool:
    """Whether a host may steer through ``lease`` now (C1's ``request_boundary``): a live owner,
    whose runtime's boundaries deliver steers (or that recorded nothing: an older node)."""
    return lease is not None and lease.live and lease.delivery != "unavailable"


@attrs.frozen
class Request:
    """One pending request as the owner reads it."""

    request_no: int
    input: Input
    anchor: str
    digest: str
    node_id: str
    stop: str | None = None
    """A stop of generation ``anchor`` with this ``StopReason`` value, not a steer (``input`` unused)."""
    problem: str | None = None
    """Set for a row no node of this library wrote (its ``input`` is not the JSON a node stores):
    what is wrong with it. The owner quarantines it (``answer_malformed``), never decides it."""


@attrs.frozen
class Submission:
    """One host's request, as a node stores it."""

    session_id: str
    input: Input
    digest: str
    anchor: str
    stop: str | None = None
    """A stop of generation ``anchor`` with this ``StopReason`` value, not a steer (``input`` unused)."""


@attrs.frozen
class Decision:
    """What the owner's core answered to one request."""

    request: Request
    receipt: Receipt


@attrs.frozen
class Prior:
    """An input accepted by an earlier owner of the session (its runtime is gone)."""

    digest: str
    generation_id: str
    receipt: Receipt


@attrs.frozen
class Taken:
    """A lease just taken: the new epoch, and what earlier owners left."""

    epoch: int
    prior: dict[str, Prior]
    recovered_held: int
    recovered_unknown: int


def answer_without_runtime(item: Submission, row: Sequence[Any] | None) -> Receipt:
    """What a session with no live owner answers ``item`` with: the core's one order (C7,
    ``_admission.decide``) on what the store knows. No generation runs, so a valid new id is
    ``stale-generation``; the stored receipt's row (digest, generation id, disposition, reason;
    ``None``: the id was never accepted) makes an identical repeat answer with its receipt and
    other content ``invalid-input`` or ``identity-conflict``, as the owner's core would. Texts are
    checked against the default limit (``DEFAULT_MAX_TEXT_CHARS``): no owner is there to say its own."""
    input, anchor = item.input, item.anchor
    same = row is not None and row[0] == item.digest and row[1] == anchor
    answer = admission.decide(
        kind_ok=input.kind in KINDS,
        known=row is not None,
        same=same,
        problem=None if same else input_problem(input.id, input.text, DEFAULT_MAX_TEXT_CHARS),
        running=False,
    )
    if answer == admission.REPEAT and row is not None:
        return _receipt(True, input.id, anchor, row[2], row[3])
    return Receipt(False, input.id, anchor, None, answer)


def answer_malformed(request: Request) -> Receipt:
    """The owner's answer to a quarantined request row (``Request.problem`` set): the core's one
    order (C7, ``_admission.decide``) on what is known of it, its content unreadable, so
    ``invalid-input``. Identified by the row's own id and anchor columns (printable forms)."""
    answer = admission.decide(problem=request.problem)
    return Receipt(False, request.input.id, request.anchor, None, answer)


def receipt_to_wire(receipt: Receipt) -> str:
    """ASCII JSON: a refused id may hold a lone surrogate, which no wake-up could carry raw."""
    return json.dumps(receipt.to_dict(), separators=(",", ":"))


def printable(value: str) -> str:
    """A host's id as a column people read: NUL and lone surrogates escaped, never stored raw."""
    if "\x00" not in value and utf8_encodable(value):
        return value
    return value.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _input_json(input: Input, anchor: str, stop: str | None) -> str:
    """The exact input as ASCII JSON: NUL and lone surrogates survive any store (C27: the owner's
    core sees what the host sent, and refuses it exactly as in-process). A stop adds ``stop``."""
    wire = {"kind": input.kind, "text": input.text, "id": input.id, "anchor": anchor}
    if stop is not None:
        wire["stop"] = stop
    return json.dumps(wire)


def _identity_json(input_id: str, anchor: str) -> str:
    return json.dumps({"id": input_id, "anchor": anchor})


def _request(row: Sequence[Any]) -> Request:
    """One pending row (``request_no, input, digest, node_id, input_id, anchor``) as a request.

    A row no node of this library wrote (its ``input`` not JSON, not an object, a field missing
    or of another type: a bug elsewhere, a hand edit, a damaged page) is never decoded into an
    error that would fail every owner that reads it: it comes back with its ``problem``, to be
    quarantined (``answer_malformed``) while the session lives on.
    """
    no, wire, digest, node_id, input_id, anchor = row
    try:
        value = json.loads(wire)
        if not isinstance(value, dict):
            raise TypeError(f"a JSON {type(value).__name__}, not an object")
        fields = [value["kind"], value["text"], value["id"], value["anchor"]]
        stop = value.get("stop")
        if not all(type(f) is str for f in fields) or not (stop is None or type(stop) is str):
            raise TypeError("a field that is not a string")
        if type(digest) is not str:
            raise TypeError("a digest that is not a string")
        kind, text, id_, anchor_ = fields
        return Request(int(no), Input(kind, text, id=id_), anchor_, digest, str(node_id), stop)
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        problem = f"request row {no} is malformed ({type(exc).__name__}: {str(exc)[:120]})"
    id_text = input_id if type(input_id) is str else ""
    anchor_text = anchor if type(anchor) is str else ""
    return Request(int(no), Input("steer", "", id=id_text), anchor_text, "", str(node_id), None, problem)


def input_digest(input: Input) -> str:
    """The journal's content digest (``_admission.content_digest``); an input no journal could
    hold (a lone surrogate) still gets one, which can never equal a storable input's."""
    return content_digest(input.kind, input.text)


def receipt_from_wire(text: str) -> Receipt:
    wire = json.loads(text)
    disposition = wire["disposition"]
    return Receipt(
        bool(wire["accepted"]),
        wire["inputId"],
        wire["generationId"],
        None if disposition is None else Disposition(disposition),
        wire.get("reason"),
    )


#: One statement with ``?`` placeholders and its parameters.
Statement = tuple[str, Sequence[Any]]

#: A wake-up's payload stays under PostgreSQL's NOTIFY limit (8,000 bytes) and one datagram.
MAX_PAYLOAD: Final = 7_000


def _chunks(lines: Sequence[str]) -> list[str]:
    """Join reply lines ("NO RECEIPT-JSON") into payloads of at most ``MAX_PAYLOAD`` UTF-8 bytes."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        length = len(line.encode("utf-8", "surrogatepass")) + 1
        if current and size + length > MAX_PAYLOAD:
            chunks.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += length
    if current:
        chunks.append("\n".join(current))
    return chunks


def _receipt(accepted: Any, input_id: str, generation_id: str, disposition: Any, reason: Any) -> Receipt:
    return Receipt(
        bool(accepted),
        input_id,
        generation_id,
        None if disposition is None else Disposition(disposition),
        reason,
    )


@attrs.frozen
class Dialect:
    """What the shared statements splice in per engine; every other word of SQL is shared."""

    serial: str
    """The serial primary key type (``INTEGER``, ``BIGSERIAL``)."""
    now: str
    """The store's clock, seconds since the epoch (leases are judged on it)."""
    lock_pending: str = ""
    """Appended to the owner's read of the pending requests (``FOR UPDATE SKIP LOCKED``)."""
    lock_lease: str = ""
    """Appended to a read of the lease row that must wait out an owner's commit (``FOR UPDATE``)."""
    lock_fence: str = ""
    """Appended to the owner's fence: holds the lease row against a taker until the commit."""
    notify_owner: str | None = None
    """An expression that wakes the row's ``owner_node_id`` for its ``session_id`` inside the
    insert (so insert, wake-up and commit travel in one round trip); ``None``: the wake-up is
    owed with ``notify`` after the insert."""
    lock_schema: str | None = None
    """A statement that serialises two nodes creating or migrating the schema at once, inside
    the transaction (``None``: beginning a writing transaction already holds the store)."""


#: Version 1: the tables as the fleet first shipped them (issue 15).
_VERSION_1: Final = (
    """
    CREATE TABLE ls_leases (
        session_id TEXT PRIMARY KEY,
        node_id TEXT,                 -- NULL: free
        epoch BIGINT NOT NULL,        -- +1 at every take; fences every owner write
        expires_at DOUBLE PRECISION NOT NULL,
        holder_pid BIGINT,            -- PostgreSQL: the owner's backend pid (to end a zombie's session)
        generation_id TEXT            -- the owner's running generation, for hosts to anchor to
    )
    """,
    """
    CREATE TABLE ls_requests (
        request_no {serial} PRIMARY KEY,
        session_id TEXT NOT NULL,
        input_id TEXT NOT NULL,       -- for people: NUL and lone surrogates escaped
        anchor TEXT NOT NULL,         -- the generation id the host anchored to (escaped alike)
        input TEXT,                   -- exact JSON: kind, text, id, anchor (text dropped when settled)
        digest TEXT NOT NULL,
        node_id TEXT NOT NULL,        -- the requester, told the receipt on decision
        owner_node_id TEXT,           -- the owner it was stored for (woken by the insert)
        state TEXT NOT NULL CHECK (state IN ('pending', 'decided', 'withdrawn')),
        accepted BOOLEAN,
        disposition TEXT,
        reason TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        settled_at DOUBLE PRECISION
    )
    """,
    "CREATE INDEX ls_requests_pending ON ls_requests (session_id, request_no) WHERE state = 'pending'",
    """
    CREATE TABLE ls_receipts (
        session_id TEXT NOT NULL,
        epoch BIGINT NOT NULL,        -- the owner's epoch: identities are per runtime
        input_id TEXT NOT NULL,
        generation_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        digest TEXT NOT NULL,
        disposition TEXT NOT NULL CHECK (disposition IN ('queued', 'applied', 'held', 'unknown')),
        marked BOOLEAN NOT NULL DEFAULT FALSE,  -- the write-ahead mark is durable: maybe written
        reason TEXT,
        accepted_sequence BIGINT NOT NULL,
        sequence BIGINT,
        accepted_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (session_id, input_id, epoch)
    )
    """,
    "CREATE INDEX ls_receipts_queued ON ls_receipts (session_id) WHERE disposition = 'queued'",
    """
    CREATE TABLE ls_changes (
        id {serial} PRIMARY KEY,
        session_id TEXT NOT NULL,
        epoch BIGINT NOT NULL,
        input_id TEXT NOT NULL,
        generation_id TEXT NOT NULL,
        change TEXT NOT NULL,
        disposition TEXT NOT NULL,
        reason TEXT,
        sequence BIGINT,
        time DOUBLE PRECISION NOT NULL
    )
    """,
    "CREATE TABLE ls_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "INSERT INTO ls_meta (key, value) VALUES ('schema_version', '1')",
)

#: The schema, as the migrations that build it: ``MIGRATIONS[n - 1]`` takes a store from
#: version n - 1 to n (version 0: no tables yet), so a new store and an old one end up
#: alike. Never edit one that shipped: add the next, and test it from the one before
#: (``tests/test_fleet_schema.py``). ``{serial}`` is the dialect's serial type.
MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    _VERSION_1,
    # 2: a session's changes by their session: pruning a session (docs/fleet.md) and reading its
    # audit history scanned the whole table, which grows by three rows per steer for good.
    ("CREATE INDEX ls_changes_session ON ls_changes (session_id, epoch)",),
    # 3: the owning runtime's delivery modes (C30), written by the take, so that a host shows how
    # the session's boundaries deliver (``GET /v1/sessions``' ``mode``). NULL: a free lease, or one
    # taken by an older node still running against the migrated store. No CHECK: a later mode
    # must not need a rebuild of the table on SQLite; readers take what they know.
    (
        "ALTER TABLE ls_leases ADD COLUMN steering_mode TEXT",
        "ALTER TABLE ls_leases ADD COLUMN follow_up_mode TEXT",
    ),
    # 4: whether the owner's boundaries deliver steers at all (C1's ``mode``: ``request_boundary``,
    # or ``unavailable`` for a runtime made with ``boundary_delivery=False``), written by the take,
    # so that a remote capability and ``GET /v1/sessions`` say what the owner's own capability
    # says. NULL: a free lease, or one taken by an older node (read as ``request_boundary``).
    ("ALTER TABLE ls_leases ADD COLUMN delivery TEXT",),
)

#: The schema version this library writes and reads (``ls_meta.schema_version``).
SCHEMA_VERSION: Final = len(MIGRATIONS)

_ENTRY_COLUMNS: Final = (
    "epoch, session_id, input_id, generation_id, kind, digest, disposition, reason, marked, "
    "accepted_sequence, sequence, accepted_at, updated_at"
)

#: Requests one owner transaction decides at most (group commit; the rest wait for the next).
MAX_BATCH: Final = 512


def _entry(row: Sequence[Any]) -> JournalEntry:
    return JournalEntry(
        runtime_no=int(row[0]),
        session_id=row[1],
        input_id=row[2],
        generation_id=row[3],
        kind=row[4],
        digest=row[5],
        disposition=Disposition(row[6]),
        reason=row[7],
        marked=bool(row[8]),
        accepted_sequence=int(row[9]),
        sequence=None if row[10] is None else int(row[10]),
        accepted_at=float(row[11]),
        updated_at=float(row[12]),
    )


class StoreConnection(abc.ABC):
    """One connection to a fleet store; every method is one transaction (except the batch pair).

    Used from one worker thread at a time. ``nudges`` collects the wake-ups a committed
    transaction owes (SQLite sends them after the commit; PostgreSQL sends them inside it
    and leaves the list empty).
    """

    #: the engine's fragments of the shared statements
    dialect: ClassVar[Dialect]

    def __init__(self) -> None:
        self.nudges: list[tuple[str, str]] = []

    # -- the engine-specific part ----------------------------------------------------------

    @abc.abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement written with ``?`` placeholders; a DB-API cursor."""

    def pipeline(self) -> contextlib.AbstractContextManager[Any]:
        """Send the statements of the block without waiting for each reply (PostgreSQL)."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def begin(self) -> None:
        """Begin a writing transaction (SQLite: ``BEGIN IMMEDIATE``)."""

    def begin_read(self) -> None:
        """Begin a reading transaction (never waits for a writer)."""
        self.execute("BEGIN")

    @abc.abstractmethod
    def commit(self) -> None: ...

    @abc.abstractmethod
    def rollback(self) -> None: ...

    @abc.abstractmethod
    def now(self) -> float:
        """The store's clock, seconds since the epoch (inside a transaction where it matters)."""

    @abc.abstractmethod
    def try_session_lock(self, session_id: str) -> bool:
        """Take the session's liveness lock without waiting; False if a live process holds it."""

    @abc.abstractmethod
    def release_session_lock(self, session_id: str) -> None: ...

    @abc.abstractmethod
    def holds_session_lock(self, session_id: str) -> bool: ...

    @abc.abstractmethod
    def end_holder(self, session_id: str, holder_pid: int | None) -> bool:
        """End an expired holder's session with the store if the engine can (PostgreSQL can);
        True if this connection then holds the session's liveness lock."""

    @abc.abstractmethod
    def my_pid(self) -> int | None: ...

    def holder_gone(self, holder_pid: int | None, *, expired: bool) -> bool:
        """Whether the lease's holder (``holder_pid``, as ``my_pid`` of its take recorded it) is
        surely gone, its liveness lock aside. Here: its lease expired (a connection's server
        process says nothing of the client's)."""
        return expired

    @abc.abstractmethod
    def notify(self, node_id: str, payload: str) -> None:
        """Owe a wake-up to ``node_id`` (sent with the commit)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def sqlite_error(self, exc: BaseException) -> str | None:
        """SQLite's name of the error ``exc`` (``"SQLITE_FULL"``), for ``journal.failed``; ``None``
        when it is not SQLite's."""
        return None

    # -- schema ------------------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the tables on first use, migrate an older schema, refuse a newer one.

        An up-to-date store costs one read. An older one is migrated in one transaction,
        every migration after its version in order, so a failure leaves it as it was; two
        nodes opening it at once migrate it once (the dialect's ``lock_schema``, or the
        writing transaction itself on SQLite). Raises ``FleetError`` for a store newer than
        this library and for tables that are not a fleet store's.
        """
        with self._reading():
            version = self._schema_version()
        if version == SCHEMA_VERSION:
            return
        self.begin()
        try:
            if self.dialect.lock_schema is not None:
                self.execute(self.dialect.lock_schema)
            version = self._schema_version()  # again, under the lock: another node may have done it
            for statements in MIGRATIONS[version:]:
                for statement in statements:
                    self.execute(statement.format(serial=self.dialect.serial))
            if version < SCHEMA_VERSION:
                self.execute(
                    "UPDATE ls_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
                )
            self.commit()
        except BaseException:
            self.rollback()
            raise

    def _schema_version(self) -> int:
        """The store's schema version (0: no tables yet); ``FleetError`` for one this library
        cannot open (newer than it, or not a fleet store's)."""
        if not self.table_exists("ls_meta"):
            return 0
        row = self.execute("SELECT value FROM ls_meta WHERE key = 'schema_version'").fetchone()
        try:
            version = int(row[0]) if row is not None else None
        except ValueError:
            version = None
        if version is None or version < 1:
            raise FleetError(
                f"fleet store has an ls_meta table without a schema version this library knows "
                f"({None if row is None else row[0]!r}): not a fleet store"
            )
        if version > SCHEMA_VERSION:
            raise FleetError(
                f"fleet store schema version {version} is newer than this library's {SCHEMA_VERSION}: "
                "upgrade live-steering"
            )
        return version

    @abc.abstractmethod
    def table_exists(self, name: str) -> bool: ...

    # -- leases ------------------------------------------------------------------------------

    def _lease_row(self, session_id: str, *, lock: bool) -> Any:
        return self.execute(
            "SELECT node_id, epoch, expires_at, holder_pid, generation_id, steering_mode, follow_up_mode, "
            "delivery FROM ls_leases WHERE session_id = ?" + (self.dialect.lock_lease if lock else ""),
            (session_id,),
        ).fetchone()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """One read transaction: committed when the block ends, rolled back when it raises."""
        self.begin_read()
        try:
            yield
            self.commit()
        except BaseException:
            self.rollback()
            raise

    def read_lease(self, session_id: str) -> Lease | None:
        with self._reading():
            row = self._lease_row(session_id, lock=False)
            now = self.now()
        if row is None:
            return None
        node, epoch, expires, _pid, generation, steering_mode, follow_up_mode, delivery = row
        return Lease(
            session_id,
            node,
            int(epoch),
            float(expires),
            generation,
            node is not None and expires >= now,
            steering_mode,
            follow_up_mode,
            delivery,
        )

    def probed_lease(self, session_id: str) -> Lease | None:
        """``read_lease``, with ``live`` False also when the owner's process is gone (its liveness
        lock is free: ``kill -9`` drops it at once, while the lease stays unexpired for up to
        its TTL). A read and a lock probe; writes nothing."""
        lease = self.read_lease(session_id)
        if lease is not None and lease.live and self._owner_gone(session_id):
            return attrs.evolve(lease, live=False)
        return lease

    def owner_died(self, session_id: str) -> bool:
        """True if the lease is unexpired but its owner's process is gone (see ``probed_lease``),
        or the lease was freed meanwhile (another node's recovery: no owner is left to decide a
        stored request); an owner that is only stopped or slow keeps its lock and is not reported."""
        lease = self.read_lease(session_id)
        if lease is None:
            return False
        if lease.node_id is None:
            return True
        return lease.live and self._owner_gone(session_id)

    def _owner_gone(self, session_id: str) -> bool:
        if self.holds_session_lock(session_id) or not self.try_session_lock(session_id):
            return False  # this connection owns it, or a live process holds its lock
        self.release_session_lock(session_id)
        return True

    def take(
        self,
        session_id: str,
        node_id: str,
        ttl: float,
        modes: tuple[str, str, str] | None = None,
    ) -> Taken | None:
        """Take the lease if free, expired or held by a dead process; None if a live owner holds it.

        In the same transaction: bump the epoch, record the new owner's delivery ``modes``
        (``(steering_mode, follow_up_mode, delivery)``: C30's two and C1's ``mode``; ``None``: not
        known, stored as NULL), finalise
        what earlier owners left queued (C23), and read their inputs so the new owner answers
        repeats of them. Cheap while a live owner holds it (a read and a lock probe, no write),
        so a waiting worker may poll.
        """
        lease = self.read_lease(session_id)
        if lease is not None and lease.live and not self.try_session_lock(session_id):
            return None
        self._end_expired_zombie(session_id)
        self.begin()
        got_lock = False
        try:
            # a first owner creates the row; two at once both get here, one row (no unique error)
            self.execute(
                "INSERT INTO ls_leases (session_id, node_id, epoch, expires_at) VALUES (?, NULL, 0, 0) "
                "ON CONFLICT (session_id) DO NOTHING",
                (session_id,),
            )
            row = self._lease_row(session_id, lock=True)
            now = self.now()
            node, epoch, expires, holder_pid = row[:4]
            got_lock = self.try_session_lock(session_id)
            free = node is None or expires < now
            if not free and not got_lock:
                self.rollback()
                return None
            if not got_lock:
                # expired, but its process still holds the lock: a zombie (stopped, partitioned)
                got_lock = self.end_holder(session_id, holder_pid)
            epoch = int(epoch) + 1
            steering_mode, follow_up_mode, delivery = (None, None, None) if modes is None else modes
            self.execute(
                "UPDATE ls_leases SET node_id = ?, epoch = ?, expires_at = ?, holder_pid = ?, "
                "generation_id = NULL, steering_mode = ?, follow_up_mode = ?, delivery = ? "
                "WHERE session_id = ?",
                (
                    node_id,
                    epoch,
                    now + ttl,
                    self.my_pid(),
                    steering_mode,
                    follow_up_mode,
                    delivery,
                    session_id,
                ),
            )
            held, unknown = self._finalise(session_id, now)
            prior = self._prior(session_id)
            self.commit()
        except BaseException:
            self.rollback()
            if got_lock:
                self.release_session_lock(session_id)
            raise
        return Taken(epoch, prior, held, unknown)

    def recover_if_gone(self, session_id: str) -> bool:
        """``recover``, only when the owner surely is gone: what a host's read runs on finding a
        queued input or a lease not live, so that it tells what the next take would (C23) instead
        of ``queued`` for an input no process can apply any more.

        A free liveness lock alone does not say so: a PostgreSQL owner whose connection was cut
        lives on and takes its lock again at its next fence, and a SQLite standby that took a
        stopped owner's session gets the lock only once that process is gone. So the lease's
        holder must be gone too (``holder_gone``: on SQLite its process, on PostgreSQL an
        expired lease). An owner that lives on (stopped, slow, reconnecting) is left to a
        standby's take or an explicit ``recover``: it may still apply what it holds. Cheap when
        there is nothing to do (a read, and at most a process check and a lock probe)."""
        with self._reading():
            row = self._lease_row(session_id, lock=False)
            now = self.now()
        if row is None or row[0] is None:
            return False
        holder = None if row[3] is None else int(row[3])
        if not self.holder_gone(holder, expired=float(row[2]) < now):
            return False
        if not self._owner_gone(session_id):
            return False
        return self.recover(session_id)

    def recover(self, session_id: str) -> bool:
        """Any node's recovery: if the owner is dead or expired, free the lease and finalise (C23).

        Cheap while the owner lives (a read and a lock probe, no write), so hosts may poll it.
        """
        lease = self.read_lease(session_id)
        if lease is None or lease.node_id is None:
            return False
        if lease.live:
            if not self.try_session_lock(session_id):
                return False  # a live owner: nothing to do
            self.release_session_lock(session_id)  # dead: taken again below, under the row lock
        self._end_expired_zombie(session_id)
        self.begin()
        got_lock = False
        try:
            row = self._lease_row(session_id, lock=True)
            if row is None or row[0] is None:
                self.rollback()
                return False
            epoch, expires, holder_pid = row[1:4]
            now = self.now()
            got_lock = self.try_session_lock(session_id)
            if not got_lock and expires >= now:
                self.rollback()
                return False
            if not got_lock:
                got_lock = self.end_holder(session_id, holder_pid)
            self.execute(
                "UPDATE ls_leases SET node_id = NULL, epoch = ?, holder_pid = NULL, generation_id = NULL, "
                "steering_mode = NULL, follow_up_mode = NULL, delivery = NULL WHERE session_id = ?",
                (int(epoch) + 1, session_id),
            )
            self._finalise(session_id, now)
            self.commit()
            return True
        except BaseException:
            self.rollback()
            raise
        finally:
            if got_lock:
                self.release_session_lock(session_id)

    def _end_expired_zombie(self, session_id: str) -> None:
        """Before locking the lease row: end an expired owner that still holds its session.

        A stopped owner may hold the lease row's lock in an open transaction, so this must
        come before ``SELECT ... FOR UPDATE`` (which would wait for it for ever).
        """
        lease = self.read_lease(session_id)
        if lease is None or lease.node_id is None or lease.live:
            return
        if not self.try_session_lock(session_id):
            with self._reading():
                row = self._lease_row(session_id, lock=False)
            self.end_holder(session_id, None if row is None or row[3] is None else int(row[3]))

    def release(self, session_id: str, node_id: str, epoch: int) -> None:
        """Give the lease up (after the owner's last commit); a fenced owner changes nothing."""
        self.begin()
        try:
            self.execute(
                "UPDATE ls_leases SET node_id = NULL, holder_pid = NULL, generation_id = NULL, "
                "steering_mode = NULL, follow_up_mode = NULL, delivery = NULL "
                "WHERE session_id = ? AND node_id = ? AND epoch = ?",
                (session_id, node_id, epoch),
            )
            self.commit()
        except BaseException:
            self.rollback()
            raise
        finally:
            self.release_session_lock(session_id)

    def _finalise(self, session_id: str, now: float) -> tuple[int, int]:
        rows = self.execute(
            "SELECT epoch, input_id, generation_id, marked FROM ls_receipts "
            "WHERE session_id = ? AND disposition = 'queued' ORDER BY epoch, accepted_sequence",
            (session_id,),
        ).fetchall()
        counts = [0, 0]
        lost = HoldReason.RUNTIME_LOST.value
        for epoch, input_id, generation_id, marked in rows:
            # marked: the writer may have been handed it, so never claim it was not (C23)
            disposition = Disposition.UNKNOWN if marked else Disposition.HELD
            counts[bool(marked)] += 1
            self.execute(
                "UPDATE ls_receipts SET disposition = ?, reason = ?, updated_at = ? "
                "WHERE session_id = ? AND epoch = ? AND input_id = ?",
                (disposition.value, lost, now, session_id, epoch, input_id),
            )
            self.execute(
                "INSERT INTO ls_changes (session_id, epoch, input_id, generation_id, change, disposition, "
                "reason, "
                "sequence, time) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?)",
                (
                    session_id,
                    epoch,
                    input_id,
                    generation_id,
                    ChangeKind.RECOVERED.value,
                    disposition.value,
                    lost,
                    now,
                ),
            )
        return counts[0], counts[1]

    def _prior(self, session_id: str) -> dict[str, Prior]:
        rows = self.execute(
            "SELECT input_id, digest, generation_id, disposition, reason FROM ls_receipts "
            "WHERE session_id = ? ORDER BY epoch",
            (session_id,),
        ).fetchall()
        return {
            input_id: Prior(
                digest, generation_id, _receipt(True, input_id, generation_id, disposition, reason)
            )
            for input_id, digest, generation_id, disposition, reason in rows
        }

    # -- the owner's group commit -------------------------------------------------------------
    #
    # Each of the three hot transactions (the owner's fence-and-lock, its write-and-commit, a
    # requester's insert) is built here as a list of statements and read back by one function,
    # so the two ways of running them share every statement: ``begin_batch`` and friends run
    # them with ``execute`` (on a worker thread), the ``*_async`` forms are what the owner and
    # the node await (by default the same, on a worker thread; PostgreSQL sends them from the
    # event loop itself, see ``_postgres.py``). The caller of an ``*_async`` form holds the
    # connection's limiter: nothing else uses the connection meanwhile.

    def _batch_statements(
        self,
        session_id: str,
        node_id: str,
        epoch: int,
        renew: float | None,
        holder_pid: int | None = None,
    ) -> list[Statement]:
        """BEGIN, the fence, the locked read of the pending requests.

        The fence holds the lease row until the commit (a taker's ``FOR UPDATE`` waits for
        it; SQLite: ``BEGIN IMMEDIATE`` already holds the whole store) and yields a row only
        while the lease's epoch is ours. ``renew``: also renew the lease by that TTL (the owner
        asks every ``ttl / 3``; a lease row rewritten at every decision is a page written for
        nothing). ``holder_pid``: also record this connection's server process in the lease row
        (PostgreSQL, after a reconnect: the pid a taker ends when this owner becomes a zombie;
        fenced like the rest, so a fenced owner never names itself in a new owner's row).
        """
        sets: list[str] = []
        values: list[Any] = []
        if renew is not None:
            sets.append(f"expires_at = {self.dialect.now} + ?")
            values.append(float(renew))
        if holder_pid is not None:
            sets.append("holder_pid = ?")
            values.append(int(holder_pid))
        if not sets:
            fence: Statement = (
                "SELECT epoch FROM ls_leases WHERE session_id = ? AND node_id = ? AND epoch = ?"
                + self.dialect.lock_fence,
                (session_id, node_id, epoch),
            )
        else:
            fence = (
                f"UPDATE ls_leases SET {', '.join(sets)} "
                "WHERE session_id = ? AND node_id = ? AND epoch = ? RETURNING epoch",
                (*values, session_id, node_id, epoch),
            )
        return [
            ("BEGIN", ()),
            fence,
            (
                "SELECT request_no, input, digest, node_id, input_id, anchor FROM ls_requests "
                "WHERE session_id = ? AND state = 'pending' ORDER BY request_no LIMIT ?"
                + self.dialect.lock_pending,
                (session_id, MAX_BATCH),
            ),
        ]

    @staticmethod
    def _batch_requests(
        session_id: str, epoch: int, fenced: int, rows: Sequence[Sequence[Any]]
    ) -> list[Request]:
        if fenced != 1:
            raise FencedError(f"the lease of session {session_id!r} was taken over (epoch {epoch} is stale)")
        return [_request(row) for row in rows]

    def begin_batch(self, session_id: str, node_id: str, epoch: int, renew: float | None) -> list[Request]:
        """Open the owner's transaction: fence (and, given a TTL, renew) the lease, lock the pending
        requests.

        Raises ``FencedError`` (transaction rolled back) if the lease is not this owner's.
        The transaction stays open for ``finish_batch`` or ``rollback``.
        """
        if not self.holds_session_lock(session_id):
            # taken from a zombie that still held it: take it once the zombie let go
            self.try_session_lock(session_id)
        return self._fence_and_lock(session_id, node_id, epoch, renew, begun=False)

    def _fence_and_lock(
        self, session_id: str, node_id: str, epoch: int, renew: float | None, *, begun: bool
    ) -> list[Request]:
        """``begin_batch`` after the liveness lock; ``begun``: the transaction is open already."""
        _begin, fence, pending = self._batch_statements(session_id, node_id, epoch, renew)
        try:
            with self.pipeline():  # PostgreSQL: BEGIN, the fence and the read in one round trip
                if not begun:
                    self.begin()
                fenced = self.execute(*fence)
                read = self.execute(*pending)
            return self._batch_requests(session_id, epoch, len(fenced.fetchall()), read.fetchall())
        except BaseException:
            self.rollback()
            raise

    async def begin_batch_async(
        self, session_id: str, node_id: str, epoch: int, renew: float | None
    ) -> list[Request]:
        """``begin_batch``, awaited (the caller holds the connection's limiter)."""
        return await anyio.to_thread.run_sync(self.begin_batch, session_id, node_id, epoch, renew)

    def finish_batch(
        self,
        session_id: str,
        epoch: int,
        changes: Sequence[JournalChange],
        decisions: Sequence[Decision],
        generation_id: tuple[str | None] | None,
    ) -> None:
        """Write the journal's changes and the decisions, tell the requesters, commit."""
        writes, replies = self._batch_writes(session_id, epoch, changes, decisions, generation_id)
        try:
            with self.pipeline():
                for sql, params in writes:
                    self.execute(sql, params)
                for node, payload in replies:
                    self.notify(node, payload)
                self.commit()
        except BaseException:
            self.rollback()
            raise

    async def finish_batch_async(
        self,
        session_id: str,
        epoch: int,
        changes: Sequence[JournalChange],
        decisions: Sequence[Decision],
        generation_id: tuple[str | None] | None,
    ) -> None:
        """``finish_batch``, awaited (the caller holds the connection's limiter)."""
        await anyio.to_thread.run_sync(
            self.finish_batch, session_id, epoch, changes, decisions, generation_id
        )

    async def rollback_async(self) -> None:
        """``rollback``, awaited (the caller holds the connection's limiter)."""
        await anyio.to_thread.run_sync(self.rollback)

    def _batch_writes(
        self,
        session_id: str,
        epoch: int,
        changes: Sequence[JournalChange],
        decisions: Sequence[Decision],
        generation_id: tuple[str | None] | None,
    ) -> tuple[list[Statement], list[tuple[str, str]]]:
        """The statements of the owner's write, and the wake-ups (node, payload) it owes."""
        writes: list[Statement] = []
        for c in changes:
            writes += self._change_statements(session_id, epoch, c)
        now = time.time()  # a record only
        replies: dict[str, list[str]] = {}
        for d in decisions:
            writes.append(
                (
                    "UPDATE ls_requests SET state = 'decided', input = ?, accepted = ?, disposition = ?, "
                    "reason = ?, settled_at = ? WHERE request_no = ? AND state = 'pending'",
                    (
                        _identity_json(d.request.input.id, d.request.anchor),
                        d.receipt.accepted,
                        None if d.receipt.disposition is None else d.receipt.disposition.value,
                        d.receipt.reason,
                        now,
                        d.request.request_no,
                    ),
                )
            )
            replies.setdefault(d.request.node_id, []).append(
                f"{d.request.request_no} {receipt_to_wire(d.receipt)}"
            )
        if generation_id is not None:
            writes.append(
                (
                    "UPDATE ls_leases SET generation_id = ? WHERE session_id = ? AND epoch = ?",
                    (generation_id[0], session_id, epoch),
                )
            )
        wakeups = [(node, "r" + chunk) for node, lines in replies.items() for chunk in _chunks(lines)]
        return writes, wakeups

    @staticmethod
    def _change_statements(session_id: str, epoch: int, c: JournalChange) -> list[Statement]:
        statements: list[Statement] = []
        if c.change is ChangeKind.ACCEPTED:
            statements.append(
                (
                    "INSERT INTO ls_receipts (session_id, epoch, input_id, generation_id, kind, digest, "
                    "disposition, "
                    "marked, reason, accepted_sequence, sequence, accepted_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, 'queued', FALSE, NULL, ?, ?, ?, ?)",
                    (
                        session_id,
                        epoch,
                        c.input_id,
                        c.generation_id,
                        c.kind,
                        c.digest,
                        c.admission,
                        c.sequence,
                        c.time,
                        c.time,
                    ),
                )
            )
        elif c.change is ChangeKind.WRITING:
            statements.append(
                (
                    "UPDATE ls_receipts SET marked = TRUE "
                    "WHERE session_id = ? AND epoch = ? AND input_id = ? AND disposition = 'queued'",
                    (session_id, epoch, c.input_id),
                )
            )
        else:
            statements.append(
                (
                    "UPDATE ls_receipts SET disposition = ?, reason = ?, sequence = ?, updated_at = ? "
                    "WHERE session_id = ? AND epoch = ? AND input_id = ? AND disposition = 'queued'",
                    (c.disposition.value, c.reason, c.sequence, c.time, session_id, epoch, c.input_id),
                )
            )
        statements.append(
            (
                "INSERT INTO ls_changes (session_id, epoch, input_id, generation_id, change, disposition, "
                "reason, "
                "sequence, time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    epoch,
                    c.input_id,
                    c.generation_id,
                    c.change.value,
                    c.disposition.value,
                    c.reason,
                    c.sequence,
                    c.time,
                ),
            )
        )
        return statements

    # -- requesters ----------------------------------------------------------------------------

    def _insert_statements(self, node_id: str, items: Sequence[Submission]) -> list[Statement]:
        """One insert per request, each stored only for its session's live owner (its number and
        owner back; PostgreSQL: the owner's wake-up inside the statement)."""
        now = time.time()  # a record only: liveness is judged on the store's clock
        insert = (
            "INSERT INTO ls_requests (session_id, input_id, anchor, input, digest, node_id, "
            "owner_node_id, state, created_at) "
            "SELECT ?, ?, ?, ?, ?, ?, l.node_id, 'pending', ? FROM ls_leases l "
            "WHERE l.session_id = ? AND l.node_id IS NOT NULL "
            f"AND l.expires_at >= {self.dialect.now} "
            "RETURNING request_no, owner_node_id"
        )
        notify_owner = self.dialect.notify_owner
        if notify_owner is not None:  # the wake-up rides in the insert
            insert = (
                f"WITH inserted AS ({insert}, session_id) "
                f"SELECT request_no, owner_node_id, {notify_owner} IS NULL FROM inserted"
            )
        return [
            (
                insert,
                (
                    item.session_id,
                    printable(item.input.id),
                    printable(item.anchor),
                    _input_json(item.input, item.anchor, item.stop),
                    item.digest,
                    node_id,
                    now,
                    item.session_id,
                ),
            )
            for item in items
        ]

    def submit(
        self, node_id: str, items: Sequence[Submission], *, begun: bool = False
    ) -> list[Receipt | int]:
        """Store requests for their sessions' live owners (their numbers), in one transaction.

        A session with no live owner is answered at once, in the core's one order
        (``answer_without_runtime``): a repeat of a stored input gets its stored receipt, a
        valid new one is ``stale-generation`` (no generation runs). Each owner is woken once.
        ``begun``: the transaction is open already.
        """
        woken = self.dialect.notify_owner is not None
        try:
            with self.pipeline():  # PostgreSQL: BEGIN and the inserts (and the commit) in one round trip
                if not begun:
                    self.begin()
                cursors = [
                    self.execute(sql, params) for sql, params in self._insert_statements(node_id, items)
                ]
                if woken:
                    self.commit()
            rows = [cursor.fetchall() for cursor in cursors]
            results: list[Receipt | int] = []
            owners: dict[str, str] = {}
            for item, found in zip(items, rows, strict=True):
                if found:  # stored for the live owner
                    results.append(int(found[0][0]))
                    owners[item.session_id] = found[0][1]
                else:
                    results.append(self._answer_without_owner(item))
            if not woken:
                with self.pipeline():
                    for session_id, owner in owners.items():
                        self.notify(owner, f"w{session_id}")
                    self.commit()
        except BaseException:
            self.rollback()
            raise
        return results

    async def submit_async(self, node_id: str, items: Sequence[Submission]) -> list[Receipt | int]:
        """``submit``, awaited (the caller holds the connection's limiter)."""
        return await anyio.to_thread.run_sync(self.submit, node_id, items)

    def answer_without_owner(self, item: Submission) -> Receipt:
        """The answer to ``item`` from the stored receipts, as if no live owner held the lease."""
        answer = self.answer_without_owner_at_once(item)
        if answer is not None:
            return answer
        with self._reading():
            return self._answer_without_owner(item)

    def _answer_without_owner(self, item: Submission) -> Receipt:
        answer = self.answer_without_owner_at_once(item)
        if answer is not None:
            return answer
        sql, params = self.stored_receipt_statement(item)
        return self.answer_from_stored(item, self.execute(sql, params).fetchone())

    @staticmethod
    def answer_without_owner_at_once(item: Submission) -> Receipt | None:
        """The answer to a request no live owner will decide, when it needs no stored receipt."""
        input, anchor = item.input, item.anchor
        if item.stop is not None:  # only a live owner's runtime can stop a generation
            return Receipt(False, input.id, anchor, None, NO_OWNER)
        if printable(input.id) != input.id or printable(anchor) != anchor:
            # no runtime ever accepted such an id (nor ran such a generation): nothing is stored
            return answer_without_runtime(item, None)
        return None

    @staticmethod
    def stored_receipt_statement(item: Submission) -> Statement:
        """The read of the receipt stored for ``item``'s input id, if any (the latest epoch's)."""
        return (
            "SELECT digest, generation_id, disposition, reason FROM ls_receipts "
            "WHERE session_id = ? AND input_id = ? ORDER BY epoch DESC LIMIT 1",
            (item.session_id, item.input.id),
        )

    @staticmethod
    def answer_from_stored(item: Submission, row: Sequence[Any] | None) -> Receipt:
        """The answer without an owner, from the stored receipt's row (``None``: none stored)."""
        return answer_without_runtime(item, row)

    def withdraw(self, request_no: int) -> Receipt | None:
        """Withdraw a pending request (None: it will never be decided), or its decided receipt."""
        self.begin()
        try:
            withdrawn = self.execute(
                "UPDATE ls_requests SET state = 'withdrawn', input = NULL, settled_at = ? "
                "WHERE request_no = ? AND state = 'pending'",
                (time.time(), request_no),
            ).rowcount
            receipt = None if withdrawn == 1 else self._decided(request_no)
            self.commit()
        except BaseException:
            self.rollback()
            raise
        return receipt

    def request_receipt(self, request_no: int) -> Receipt | None:
        """The decided receipt of a request, or None while it is pending (or withdrawn)."""
        with self._reading():
            receipt = self._decided(request_no)
        return receipt

    def _decided(self, request_no: int) -> Receipt | None:
        row = self.execute(
            "SELECT input, state, accepted, disposition, reason, input_id, anchor FROM ls_requests "
            "WHERE request_no = ?",
            (request_no,),
        ).fetchone()
        if row is None or row[1] != "decided":
            return None
        try:  # the exact id and anchor (a lone surrogate survives JSON); else the printable columns
            identity = json.loads(row[0])
            input_id, anchor = identity["id"], identity["anchor"]
        except (ValueError, TypeError, KeyError):
            input_id, anchor = row[5], row[6]
        return _receipt(row[2], input_id, anchor, row[3], row[4])

    # -- reading ------------------------------------------------------------------------------

    def receipt(self, session_id: str, input_id: str) -> Receipt | None:
        """The receipt of an accepted input in the session's latest runtime that accepted it."""
        if printable(input_id) != input_id:
            return None  # never accepted: the core refuses such ids (C7)
        with self._reading():
            row = self.execute(
                "SELECT generation_id, disposition, reason FROM ls_receipts "
                "WHERE session_id = ? AND input_id = ? ORDER BY epoch DESC LIMIT 1",
                (session_id, input_id),
            ).fetchone()
        return None if row is None else _receipt(True, input_id, row[0], row[1], row[2])

    def entries(
        self,
        *,
        session_id: str | None = None,
        generation_id: str | None = None,
        disposition: str | None = None,
    ) -> list[JournalEntry]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("session_id", session_id),
            ("generation_id", generation_id),
            ("disposition", disposition),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._reading():
            rows = self.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM ls_receipts{where} "
                "ORDER BY session_id, epoch, accepted_sequence",
                params,
            ).fetchall()
        return [_entry(row) for row in rows]

    def has_pending(self, session_id: str) -> bool:
        """True if a request of the session waits for its owner (a read, for an idle owner's poll)."""
        with self._reading():
            row = self.execute(
                "SELECT 1 FROM ls_requests WHERE session_id = ? AND state = 'pending' LIMIT 1", (session_id,)
            ).fetchone()
        return row is not None

    def request_states(self, session_id: str) -> dict[str, int]:
        """How many requests of the session are in each state (tests and statistics)."""
        with self._reading():
            rows = self.execute(
                "SELECT state, count(*) FROM ls_requests WHERE session_id = ? GROUP BY state", (session_id,)
            ).fetchall()
        return {state: int(n) for state, n in rows}

    def lease_sessions(self) -> list[str]:
        """Every session that has a lease row (ever owned), sorted (a read, for operators' tools)."""
        with self._reading():
            rows = self.execute("SELECT session_id FROM ls_leases ORDER BY session_id").fetchall()
        return [row[0] for row in rows]


def read_sqlite_receipts(path: str, *, session_id: str | None = None) -> list[JournalEntry] | None:
    """Read a SQLite fleet store without writing to it; ``None`` if the file is not a fleet store.

    Inputs a dead owner left ``queued`` show as stored until a node recovers the session.
    """
    import sqlite3
    from pathlib import Path

    conn = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True)
    try:
        found = conn.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'ls_receipts'")
        if found.fetchone() is None:
            return None
        where, params = ("WHERE session_id = ? ", (session_id,)) if session_id is not None else ("", ())
        rows = conn.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM ls_receipts {where}ORDER BY session_id, epoch, accepted_sequence",
            params,
        ).fetchall()
        return [_entry(row) for row in rows]
    finally:
        conn.close()
