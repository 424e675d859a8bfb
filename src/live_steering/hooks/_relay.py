"""Sending instructions to a hook-steered session from any process: ``instruct`` (sync and async).

A host (a web app, a chat bot, a script) calls ``instruct(session_id, text)``; the
instruction goes into the durable store that the vendor's hook command reads
(``_store.py``), and the answer is the same ``InstructionReceipt`` the in-memory
``HookSession.enqueue`` gives: accepted (``queued``), an identical repeat (its
current disposition), or refused with a pinned ``InstructionRefusal`` reason.
"""

from __future__ import annotations

import os
import uuid

from .._types import Disposition
from ._open import open_store
from ._session import InstructionReceipt
from ._store import DEFAULT_BUSY_TIMEOUT, HookStore, StoredReceipt

__all__ = ["instruct", "instruct_async", "to_instruction_receipt"]


def to_instruction_receipt(stored: StoredReceipt) -> InstructionReceipt:
    """The store's answer in the receipt vocabulary hosts already hold (C4 dispositions)."""
    disposition = None if stored.disposition is None else Disposition(stored.disposition)
    return InstructionReceipt(
        stored.accepted,
        stored.command_id,
        stored.session_id,
        disposition,
        stored.reason,
        stored.detail,
        repeated=stored.repeated,
    )


def instruct(
    session_id: str,
    text: str,
    *,
    id: str | None = None,
    vendor: str | None = None,
    store: HookStore | str | os.PathLike[str] | None = None,
    dsn: str | None = None,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    kind: str = "steer",
    agent_id: str | None = None,
    resume: bool = False,
) -> InstructionReceipt:
    """Queue ``text`` for the next eligible hook moment of ``session_id``; returns its receipt.

    ``kind="follow_up"``: delivered when the agent would stop, through the vendor's "do not
    stop yet" reply (the ``Stop`` decision of Claude Code, Codex, Qwen Code); refused
    ``unsupported-kind`` for a vendor without one, or when no vendor is known for the session.
    ``agent_id``: for that subagent of the session (Claude Code's ``agent_id``) instead of the
    main agent. ``resume=True``: a session that has ended takes it for its next run (it waits
    ``queued`` until the vendor resumes the session) instead of refusing ``session-ended``.

    ``id``: the command id (the audit cause, the identity for repeats); a fresh UUID
    when omitted, so only a caller-chosen id makes a retry idempotent. ``vendor``:
    bounds the text by that vendor's cap (Claude Code's 10,000 UTF-16 code units when
    the session's vendor is not known yet). ``store``: a ``HookStore``, a path, or
    ``None``; ``dsn``: a PostgreSQL store instead (the ``postgres`` extra); neither:
    ``$LIVE_STEERING_STORE_DSN`` if set, else ``default_store_path()``. Raises ``TypeError`` for non-string
    arguments, ``ValueError`` for an unknown vendor or a session id outside the
    runtime's id rules (as ``HookSession`` does), ``StoreError`` when the store cannot
    be used; everything else is a receipt.

    >>> import tempfile, os
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "hooks.db")
    >>> instruct("session-42", "Use the corrected path", id="cmd-1", store=path).to_dict()
    {'accepted': True, 'commandId': 'cmd-1', 'sessionId': 'session-42', 'disposition': 'queued'}
    >>> folder.cleanup()
    """
    for name, value in (("session_id", session_id), ("text", text)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if id is not None and not isinstance(id, str):
        raise TypeError(f"id must be a str, not {type(id).__name__}")
    command_id = id if id is not None else str(uuid.uuid4())
    if isinstance(store, HookStore):
        if dsn is not None:
            raise ValueError("give a store or a DSN, not both")
        return to_instruction_receipt(
            store.enqueue(
                session_id, command_id, text, vendor=vendor, kind=kind, agent_id=agent_id, resume=resume
            )
        )
    opened = open_store(store, dsn=dsn, busy_timeout=busy_timeout)
    try:
        return to_instruction_receipt(
            opened.enqueue(
                session_id, command_id, text, vendor=vendor, kind=kind, agent_id=agent_id, resume=resume
            )
        )
    finally:
        opened.close()


async def instruct_async(
    session_id: str,
    text: str,
    *,
    id: str | None = None,
    vendor: str | None = None,
    store: str | os.PathLike[str] | None = None,
    dsn: str | None = None,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    kind: str = "steer",
    agent_id: str | None = None,
    resume: bool = False,
) -> InstructionReceipt:
    """``instruct`` from async code (asyncio or trio): the store's work runs in a worker thread.

    Takes a store path (each call opens its own connection in the worker), never a
    shared ``HookStore`` object, whose connection belongs to the thread that made it.
    """
    import anyio.to_thread

    def call() -> InstructionReceipt:
        return instruct(
            session_id,
            text,
            id=id,
            vendor=vendor,
            store=store,
            dsn=dsn,
            busy_timeout=busy_timeout,
            kind=kind,
            agent_id=agent_id,
            resume=resume,
        )

    return await anyio.to_thread.run_sync(call)
