"""``live_steering.hooks``: steer agents whose only surface is a hook reply (rules C26, C26b: docs/rules.md).

Two layers. The relay: ``instruct(session_id, text)`` (and ``instruct_async``) from
any process puts an instruction into a durable ``SqliteHookStore``
(or ``PostgresHookStore``, one queue for agents on many machines); the vendor's hook
command, ``live-steering hook VENDOR``, claims it at the next eligible hook moment
and writes the vendor's reply. Underneath, the sans-IO ``HookSession``: one
in-memory queue per live session, ``enqueue`` and ``on_hook``, for a handler that
lives as long as its session. ``PROFILES`` holds each vendor's eligible moments, cap
and session-end moment as data. See docs/hooks.md.

Names are imported on first use, so the hook command (which imports
``live_steering.hooks._command``) loads none of the session machine's dependencies.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._open import open_store
    from ._postgres import PostgresHookStore
    from ._relay import instruct, instruct_async
    from ._session import (
        DEFAULT_QUEUE_CAPACITY,
        PROFILES,
        REDACTED,
        SEPARATOR,
        EnqueueResult,
        HookOutcome,
        HookSession,
        HookSessionStatistics,
        InstructionReceipt,
        InstructionRefusal,
        InstructionState,
        ReplyShape,
        SkipReason,
        Vendor,
        VendorProfile,
    )
    from ._sqlite import SqliteHookStore
    from ._store import (
        Claim,
        HookStore,
        StoredReceipt,
        StoreError,
        default_store_path,
    )

__all__ = [
    # the relay: durable queues shared by processes
    "instruct",
    "instruct_async",
    "HookStore",
    "SqliteHookStore",
    "PostgresHookStore",
    "open_store",
    "StoredReceipt",
    "Claim",
    "StoreError",
    "default_store_path",
    # the per-session queue and what it answers
    "HookSession",
    "HookOutcome",
    "InstructionReceipt",
    "EnqueueResult",
    "HookSessionStatistics",
    # closed vocabularies
    "InstructionRefusal",
    "InstructionState",
    "SkipReason",
    # vendor data
    "Vendor",
    "VendorProfile",
    "ReplyShape",
    "PROFILES",
    # constants
    "DEFAULT_QUEUE_CAPACITY",
    "SEPARATOR",
    "REDACTED",
]

_RELAY = ("instruct", "instruct_async")
_STORE = (
    "HookStore",
    "StoredReceipt",
    "Claim",
    "StoreError",
    "default_store_path",
)


def __getattr__(name: str) -> object:
    if name not in __all__:
        raise AttributeError(f"module 'live_steering.hooks' has no attribute {name!r}")
    if name == "PostgresHookStore":  # needs the postgres extra: imported only when named
        home = "_postgres"
    elif name == "open_store":
        home = "_open"
    elif name == "SqliteHookStore":
        home = "_sqlite"
    else:
        home = "_relay" if name in _RELAY else "_store" if name in _STORE else "_session"
    value = getattr(__import__(f"{__name__}.{home}", fromlist=[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
