"""Fleet mode: a steer sent from any process or machine reaches the runtime that owns it (C27, C28).

A worker *owns* a session's runtime through a lease with an epoch; hosts anywhere get
C1's capability for that session, whose ``submit`` stores a request, wakes the owner,
and returns the owner's receipt. The owner alone decides, in its core, in request
order, and writes receipts and journal changes in the same transaction: the fleet
store is the receipt journal of the runtimes it owns. Two engines, one interface:

* ``SQLiteFleet(path)``: processes on one machine share one file (no server);
* ``PostgresFleet(dsn)``: a fleet of machines (extra ``postgres``: ``psycopg`` 3).

>>> async with SQLiteFleet("fleet.db", node_id="worker-7") as fleet:            # doctest: +SKIP
...     async with fleet.own(LiveRuntime(session_id="chat-42")) as runtime:     # lease + journal
...         async with runtime.open_generation() as gen: ...
>>> async with SQLiteFleet("fleet.db", node_id="api-3") as fleet:               # doctest: +SKIP
...     capability = await fleet.capability("chat-42")
...     receipt = await capability["submit"](Input("steer", "Use X", id="m-1"), generation_id)
...     result = await fleet.stop("chat-42", generation_id)                      # StopResult

See docs/fleet.md. Importing this package never imports ``psycopg``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._extras import install_hint
from ._node import Fleet, FleetStatistics, StopResult
from ._owner import OwnerStatistics
from ._sqlite import SQLiteFleet
from ._store import (
    NO_OWNER,
    NOT_RUNNING,
    UNREACHABLE,
    FencedError,
    FleetError,
    Lease,
    LeaseHeldError,
    OwnerLostError,
)

if TYPE_CHECKING:
    from ._postgres import PostgresFleet

__all__ = [
    "Fleet",
    "SQLiteFleet",
    "PostgresFleet",
    "Lease",
    "FleetStatistics",
    "OwnerStatistics",
    "StopResult",
    "UNREACHABLE",
    "NO_OWNER",
    "NOT_RUNNING",
    "FleetError",
    "FencedError",
    "LeaseHeldError",
    "OwnerLostError",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresFleet":
        try:
            from ._postgres import PostgresFleet
        except ImportError as exc:
            if exc.name != "psycopg":
                raise
            raise ImportError(
                install_hint("live_steering.fleet.PostgresFleet", "postgres", "psycopg[binary]")
            ) from exc
        return PostgresFleet
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
