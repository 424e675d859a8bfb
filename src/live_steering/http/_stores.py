"""What the HTTP layer reads and asks of the two stores: the fleet (C27) and the hook relay (C26b).

Theory of operation
-------------------
Nothing here decides anything about an input. A steer for a runtime session goes to
``Fleet.submit`` (the owner's core decides, or the store when no owner lives); one for a
hook session goes to ``HookStore.enqueue`` (``_admit.decide``). This module only finds
which store holds a session, fills in the anchor the way ``live-steering steer`` does,
and turns each store's answer into C4's wire shape (``{"accepted", "inputId",
"generationId", "disposition", "reason"}``; a hook session has no generation, so its
``generationId`` is ``null``).

Events come from the stores' durable logs, never from memory of this process:

* a hook session's audit events (``HookStore.events``): their ``sequence`` is the store's;
* a runtime session's disposition changes (the fleet's ``ls_changes`` rows, which every
  owner writes in the transaction that makes them durable): their ``sequence`` is the
  row's id. The ids of one session are written in commit order (one owner transaction at
  a time holds the session's lease row; a recovery takes the same row), so a reader that
  has seen id N has seen every earlier id of the session.

The fleet has no public read of its change rows or its sessions yet; ``FleetView`` reads
them through the node's own connection (``Fleet._call``, one worker-thread call at a time),
with the statements kept here, read-only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread

from .._rules import DELIVERY, FOLLOW_UP_DELIVERY
from .._types import Disposition, Input, Receipt
from .._validate import checked_id
from ..fleet import Fleet, Lease, StopResult
from ..fleet._node import submit_unanchored
from ..fleet._store import delivers
from ..hooks._open import open_store
from ..hooks._store import HookStore, StoredReceipt

_T = TypeVar("_T")

#: Seconds a lease read anchors later submits without being read again.
LEASE_AGE: Final = 0.5
#: Sessions whose last lease read is kept (the table is emptied past it: a bound, not an LRU).
_LEASES_KEPT: Final = 10_000

#: How a runtime session's change rows read as events (C21's names).
#: The changes of an input's write: the mark before it and the apply after it (C14, C29).
_DELIVERING: Final = frozenset({"writing", "applied"})
_EVENT_OF_CHANGE: Final = {
    "accepted": "steering.accepted",
    "applied": "steering.applied",
    "held": "steering.held",
    "unknown": "steering.unknown",
}

#: A hook event's type (after its ``x.VENDOR.`` prefix) and the disposition it moves to.
_HOOK_DISPOSITION: Final = {
    "control.accepted": Disposition.QUEUED.value,
    "instruction.delivered": Disposition.APPLIED.value,
    "instruction.dropped": Disposition.HELD.value,
    "instruction.unknown": Disposition.UNKNOWN.value,
}


def receipt_wire(receipt: Receipt) -> dict[str, Any]:
    """C4's wire shape of a fleet receipt."""
    return receipt.to_dict()


def hook_receipt_wire(stored: StoredReceipt) -> dict[str, Any]:
    """C4's wire shape of a hook store's receipt; a hook session has no generation (``null``)."""
    wire: dict[str, Any] = {
        "accepted": stored.accepted,
        "inputId": stored.command_id,
        "generationId": None,
        "disposition": stored.disposition,
    }
    if stored.reason is not None:
        wire["reason"] = stored.reason
    return wire


def stop_wire(result: StopResult) -> dict[str, Any]:
    """``live-steering stop --json``'s shape."""
    return {
        "stopped": result.stopped,
        "sessionId": result.session_id,
        "generationId": result.generation_id,
        "reason": result.reason,
    }


def valid_session_id(session_id: str) -> bool:
    """Whether any runtime could have this id (C7's id rules): others are unknown sessions."""
    try:
        checked_id(session_id, "session")
    except (TypeError, ValueError):
        return False
    return True


#: A page of a session's events from the fleet store's audit rows, in ``FleetView._event``'s order:
#: ``(session_id, after, limit)``.
#: The input's ``kind`` comes from its receipt row (the same session, epoch and id): the change
#: rows keep none, and a follow-up's write and apply carry ``delivery: "follow_up"`` (C29).
CHANGES_PAGE: Final = (
    "SELECT c.id, c.input_id, c.generation_id, c.change, c.disposition, c.reason, c.sequence, c.time, "
    "c.epoch, r.kind FROM ls_changes c LEFT JOIN ls_receipts r ON r.session_id = c.session_id "
    "AND r.input_id = c.input_id AND r.epoch = c.epoch "
    "WHERE c.session_id = ? AND c.id > ? ORDER BY c.id LIMIT ?"
)


class FleetView:
    """A runtime session's reads and requests, through one open ``Fleet`` node."""

    def __init__(self, fleet: Fleet, lease_age: float = LEASE_AGE) -> None:
        self.fleet = fleet
        self.lease_age = lease_age
        self._leases: dict[str, tuple[float, Lease]] = {}

    async def _read(self, function: Callable[..., _T], *args: Any) -> _T:
        return await self.fleet._call(function, *args)

    async def session_ids(self) -> list[str]:
        return await self._read(lambda: self.fleet._store().lease_sessions())

    async def lease(self, session_id: str) -> Lease | None:
        """The session's lease, probed. A lease whose owner is surely gone is recovered first
        (``recover_if_gone``, ``Fleet.receipt``'s rule): what the dead owner left queued is
        finalised (C23), so a listing,
        a session's stream and its receipts show it ended instead of ``queued`` until a standby
        comes; the stream then carries its ``held`` / ``unknown`` events."""
        lease = await self.fleet.lease(session_id)
        if (
            lease is not None
            and lease.node_id is not None
            and not lease.live
            and await self._read(self.fleet._store().recover_if_gone, session_id)
        ):
            lease = await self.fleet.lease(session_id)
        if lease is not None:
            if len(self._leases) >= _LEASES_KEPT:
                self._leases.clear()
            self._leases[session_id] = (anyio.current_time(), lease)
        return lease

    def recent_lease(self, session_id: str) -> Lease | None:
        """The session's live lease as read at most ``lease_age`` seconds ago, else ``None``.

        A submit's one extra store read (the running generation, when the body names none)
        costs as much as the HTTP round trip itself on a busy machine; a lease read a moment
        ago anchors as well, since the owner decides whatever anchor it gets and a refused
        submit is asked again (``_app.py``)."""
        found = self._leases.get(session_id)
        if found is None or not found[1].live or anyio.current_time() - found[0] >= self.lease_age:
            return None
        return found[1]

    @staticmethod
    def describe(lease: Lease) -> dict[str, Any]:
        """The session as ``GET /v1/sessions`` lists it. ``mode`` is how the live owner's
        boundaries deliver steers (its runtime's ``steering_mode``, C30: ``"all"`` or
        ``"one-at-a-time"``, recorded on the lease by ``Fleet.own``); ``"unavailable"`` with no
        live owner (as C1's capability says); ``"request_boundary"`` for a live owner that
        recorded none (a node of an older library, still running against the migrated store);
        ``"unavailable"`` too for a live owner whose runtime delivers no steer (made with
        ``boundary_delivery=False``: C1, its own capability's mode)."""
        live = lease.live
        running = lease.generation_id if live else None
        mode = (lease.steering_mode or "request_boundary") if delivers(lease) else "unavailable"
        return {
            "id": lease.session_id,
            "kind": "runtime",
            "vendor": None,
            "owner_live": live,
            "generation": None if running is None else {"id": running},
            "mode": mode,
        }

    async def submit(
        self, session_id: str, steer: Input, generation_id: str | None, lease: Lease
    ) -> dict[str, Any]:
        """The owner's receipt (or the store's, with no live owner), anchored as ``steer`` anchors."""
        if generation_id is not None:
            return receipt_wire(await self.fleet.submit(session_id, steer, generation_id))
        # None named: the running generation. As `live-steering steer` does, a repeat is anchored
        # where it was accepted (its stored receipt answers a retry after the generation moved
        # on), and a new id with no generation running to no generation at all.
        running = lease.generation_id if lease.live else None
        return receipt_wire(await submit_unanchored(self.fleet, session_id, steer, running))

    async def receipt(self, session_id: str, input_id: str) -> dict[str, Any] | None:
        found = await self.fleet.receipt(session_id, input_id)
        return None if found is None else receipt_wire(found)

    async def wait_final(self, session_id: str, input_id: str) -> None:
        await self.fleet.wait_final(session_id, input_id)

    async def stop(self, session_id: str, generation_id: str | None, lease: Lease) -> StopResult:
        if generation_id is None:
            # The running generation; none: an anchor no owner runs, answered by the owner
            # (not-running) or by the store (no-owner), never by this layer.
            generation_id = (lease.generation_id if lease.live else None) or ""
        return await self.fleet.stop(session_id, generation_id)

    async def events(self, session_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        rows = await self._read(self._changes, session_id, after, limit)
        return [self._event(row) for row in rows]

    def _changes(self, session_id: str, after: int, limit: int) -> list[Sequence[Any]]:
        store = self.fleet._store()
        store.begin_read()
        try:
            rows = store.execute(CHANGES_PAGE, (session_id, after, limit)).fetchall()
            store.commit()
        except BaseException:
            store.rollback()
            raise
        return list(rows)

    async def holds(self, session_id: str, event_id: int) -> bool:
        """Whether the store still holds the session's event ``event_id`` (it was not pruned)."""
        return await self._read(self._holds, session_id, event_id)

    def _holds(self, session_id: str, event_id: int) -> bool:
        store = self.fleet._store()
        store.begin_read()
        try:
            row = store.execute(
                "SELECT 1 FROM ls_changes WHERE session_id = ? AND id = ?", (session_id, event_id)
            ).fetchone()
            store.commit()
        except BaseException:
            store.rollback()
            raise
        return row is not None

    @staticmethod
    def _event(row: Sequence[Any]) -> dict[str, Any]:
        number, input_id, generation_id, change, disposition, reason, sequence, at, epoch, kind = row
        event: dict[str, Any] = {
            "type": _EVENT_OF_CHANGE.get(change, f"steering.{disposition}")
            if change != "writing"
            else "input.writing",
            "sequence": int(number),
            "time": float(at),
            "input_id": input_id,
            "target_generation_id": generation_id,
            "disposition": disposition,
            "change": change,
            "epoch": int(epoch),
            "runtime_sequence": None if sequence is None else int(sequence),
        }
        if reason is not None:
            event["reason"] = reason
        if kind is not None:  # None only when its receipt row was deleted by hand (docs/fleet.md)
            event["kind"] = kind
            if change in _DELIVERING:
                event["delivery"] = FOLLOW_UP_DELIVERY if kind == "follow_up" else DELIVERY
        return event


class HookView:
    """A hook session's reads and instructions, through the hook store (a connection per call,
    on a worker thread, as ``instruct_async`` opens one: a store's connection belongs to the
    thread that made it)."""

    def __init__(self, path: str | os.PathLike[str] | None, dsn: str | None) -> None:
        self.path = None if path is None else os.fspath(path)
        self.dsn = dsn
        self._limiter = anyio.CapacityLimiter(8)

    async def _with_store(self, function: Callable[[HookStore], _T]) -> _T:
        def call() -> _T:
            store = open_store(self.path, dsn=self.dsn)
            try:
                return function(store)
            finally:
                store.close()

        return await anyio.to_thread.run_sync(call, limiter=self._limiter)

    async def sessions(self) -> list[dict[str, Any]]:
        rows = await self._with_store(lambda store: store.sessions())
        return [self.describe(row) for row in rows]

    async def session(self, session_id: str) -> dict[str, Any] | None:
        for row in await self._with_store(lambda store: store.sessions()):
            if row["session_id"] == session_id:
                return self.describe(row)
        return None

    @staticmethod
    def describe(row: dict[str, object]) -> dict[str, Any]:
        ended = bool(row["ended"])
        return {
            "id": row["session_id"],
            "kind": "hook",
            "vendor": row["vendor"],
            "owner_live": not ended,
            "generation": None,
            "mode": "unavailable" if ended else "hook_context",
            "queued": row["queued"],
        }

    async def enqueue(self, session_id: str, steer: Input) -> dict[str, Any]:
        """The relay's receipt for a steer or a follow-up. The store decides through the one
        refusal order: a follow-up is ``unsupported-kind`` unless every vendor known for the
        session has a "do not stop yet" reply (the ``Stop`` reply of Claude Code, Codex, Qwen
        Code, C29), as is any other kind."""
        stored = await self._with_store(
            lambda store: store.enqueue(session_id, steer.id, steer.text, kind=steer.kind)
        )
        return hook_receipt_wire(stored)

    async def receipt(self, session_id: str, command_id: str) -> dict[str, Any] | None:
        stored = await self._with_store(lambda store: store.receipt(session_id, command_id))
        return None if stored is None else hook_receipt_wire(stored)

    async def events(self, session_id: str, after: int, limit: int, show_text: bool) -> list[dict[str, Any]]:
        rows = await self._with_store(
            lambda store: store.events(after=after, session_id=session_id, limit=limit, show_text=show_text)
        )
        for event in rows:
            type_ = str(event["type"])
            short = type_.split(".", 2)[2] if type_.startswith("x.") and type_.count(".") >= 2 else type_
            disposition = _HOOK_DISPOSITION.get(short)
            if "command_id" in event:
                event["input_id"] = event["command_id"]
            if disposition is not None:
                event["disposition"] = disposition
        return rows

    async def holds(self, session_id: str, event_id: int) -> bool:
        rows = await self.events(session_id, event_id - 1, 1, False)
        return bool(rows) and rows[0]["sequence"] == event_id


__all__ = [
    "FleetView",
    "HookView",
    "hook_receipt_wire",
    "receipt_wire",
    "stop_wire",
    "valid_session_id",
]
