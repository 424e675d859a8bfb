"""The body of ``live-steering hook VENDOR``: one vendor hook moment, start to finish.

A vendor's agent runs this for every hook moment of every tool call, so it must
never break or slow that agent: it imports the standard library and
``_store``/``_vendors`` only, gives up on a locked store after a bounded wait
(``HOOK_BUSY_TIMEOUT`` per transaction), and on any failure of its own writes
nothing to stdout, exits 0 and records the failure in the store (or, when the
store itself is unusable, on stderr). Stdout carries the vendor's reply and
nothing else.

Order of a delivery (C26b): claim in one transaction (``queued -> delivering``),
write the reply and flush it, then confirm (``-> delivered``). A process killed in
between leaves ``delivering`` rows that the next command of the session, or
``hooks recover``, finalises ``unknown``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from . import _vendors
from ._open import open_store
from ._store import HOOK_BUSY_TIMEOUT, Claim, HookStore, StoreError

# ``typing`` costs this process 2 ms; mypy reads this constant as typing.TYPE_CHECKING.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

__all__ = ["MAX_STDIN_BYTES", "encode_reply", "record_failure", "run_hook"]

#: Larger stdin is refused (audited, no reply): 8 MiB.
MAX_STDIN_BYTES = 8 * 1024 * 1024

#: Claims whose reply was written but whose confirm found the store locked past the bounded
#: wait. A process that handles more moments (a plugin, a test worker) confirms them first
#: thing next time; a hook command that exits leaves them to recovery (``unknown``).
_UNCONFIRMED: list[Claim] = []


def encode_reply(reply: dict[str, object]) -> bytes:
    """The exact bytes written to stdout: compact, ASCII-only JSON and a newline.

    ASCII escapes (``\\u2019``, surrogate pairs for emoji) decode to the same string
    in every vendor's JSON parser, whatever stdout's encoding.

    >>> encode_reply({"context": "caf\\u00e9"})
    b'{"context":"caf\\\\u00e9"}\\n'
    """
    return json.dumps(reply, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def _field(payload: dict[str, object], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = payload.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _parse(vendor: str, data: bytes) -> tuple[str, str, str | None, bool] | tuple[str, str, str | None]:
    """``(session_id, moment, agent_id, True)``, or ``(reason, detail, session_id)`` for input
    that cannot be used. ``agent_id``: the subagent the moment runs in (``None``: the main agent)."""
    facts = _vendors.FACTS[vendor]
    if len(data) > MAX_STDIN_BYTES:
        return ("stdin-too-large", f"{len(data):,}+ bytes on stdin (limit {MAX_STDIN_BYTES:,})", None)
    if not data.strip():
        return ("empty-input", "no hook JSON on stdin", None)
    try:
        payload = json.loads(data)
    except UnicodeDecodeError as exc:
        return ("malformed-input", f"stdin is not UTF-8: {exc.reason}", None)
    except ValueError as exc:
        return ("malformed-input", f"stdin is not JSON: {exc}", None)
    except RecursionError:
        return ("malformed-input", "stdin is JSON nested deeper than the parser goes", None)
    if not isinstance(payload, dict):
        return ("malformed-input", f"the hook JSON is a {type(payload).__name__}, not an object", None)
    session_id = _field(payload, facts.session_id_fields)
    if session_id is None:
        return (
            "missing-session-id",
            f"none of {', '.join(facts.session_id_fields)} is a non-empty string",
            None,
        )
    if (problem := _vendors.session_id_problem(session_id)) is not None:
        return ("invalid-session-id", f"{problem} ({len(session_id):,} characters)", None)
    moment = _field(payload, facts.moment_fields)
    if moment is None:
        return (
            "missing-moment",
            f"none of {', '.join(facts.moment_fields)} is a non-empty string",
            session_id,
        )
    if moment not in facts.known_moments:
        return ("unknown-moment", f"{facts.title} has no hook moment {moment[:100]!r}", session_id)
    agent_id = _field(payload, facts.agent_id_fields) if facts.agent_id_fields else None
    if agent_id is not None and _vendors.agent_id_problem(agent_id) is not None:
        return ("invalid-agent-id", f"agent id of {len(agent_id):,} characters", session_id)
    return (session_id, moment, agent_id, True)


def _read_stdin(stdin: IO[bytes]) -> bytes:
    data = stdin.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        while stdin.read(1 << 20):  # drain, so the vendor's write never fails on a closed pipe
            pass
    return data


def _say(err: IO[str], message: str) -> None:
    try:
        err.write(f"live-steering hook: {message}\n")
        err.flush()
    except Exception:
        pass


def run_hook(
    vendor: str,
    *,
    store_path: str | None = None,
    dsn: str | None = None,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
    stderr: IO[str] | None = None,
    trace: Callable[[str], None] | None = None,
    leave_open: bool = False,
    store: HookStore | None = None,
) -> int:
    """Handle one hook moment of ``vendor``; always returns 0 (see the module docs).

    The store: ``store`` (an open store of this thread, used and left open: the HTTP hook
    route keeps one per worker thread), else ``store_path`` (SQLite), ``dsn`` (PostgreSQL),
    else as ``open_store``.
    ``leave_open``: a SQLite store is not closed (the process exits at once, see
    ``_cli/hook.py``): closing the last connection of a WAL file checkpoints it, a disk flush
    the agent would wait for at every moment; SQLite's automatic checkpoint and the other
    commands' close do it instead. Every step is committed before this returns.
    """
    err = stderr if stderr is not None else sys.stderr
    try:
        data = _read_stdin(stdin if stdin is not None else sys.stdin.buffer)
    except Exception as exc:
        data = b""
        _say(err, f"cannot read stdin: {exc}")
    given = store is not None
    if store is None:
        try:
            store = open_store(store_path, dsn=dsn, busy_timeout=HOOK_BUSY_TIMEOUT, trace=trace)
        except (StoreError, ValueError) as exc:
            _say(err, str(exc))
            return 0
    try:
        _handle(store, vendor, data, stdout if stdout is not None else sys.stdout.buffer, err, trace)
    except StoreError as exc:  # locked past the bounded wait: recording it would wait again
        _say(err, str(exc))
    except Exception as exc:
        _record(store, vendor if vendor in _vendors.FACTS else None, "internal-error", repr(exc), None, err)
    finally:
        if not given and not (leave_open and store.__class__.__name__ == "SqliteHookStore"):
            store.close()
    return 0


def _record(
    store: HookStore, vendor: str | None, reason: str, detail: str, session_id: str | None, err: IO[str]
) -> None:
    try:
        store.record_failure(vendor, reason, detail, session_id=session_id)
    except Exception as exc:
        _say(err, f"{reason}: {detail} (and it could not be recorded: {exc})")


def _handle(
    store: HookStore,
    vendor: str,
    data: bytes,
    out: IO[bytes],
    err: IO[str],
    trace: Callable[[str], None] | None = None,
) -> None:
    while _UNCONFIRMED:
        store.confirm(_UNCONFIRMED[0])
        del _UNCONFIRMED[0]
    if vendor not in _vendors.FACTS:
        shown = vendor if vendor.isprintable() else ascii(vendor)
        _record(
            store,
            None,
            "unknown-vendor",
            f"{shown[:100]} is not one of {', '.join(_vendors.FACTS)}",
            None,
            err,
        )
        return
    parsed = _parse(vendor, data)
    if len(parsed) == 3:
        reason, detail, session_id = parsed
        try:
            store.record_failure(vendor, reason, detail, session_id=session_id)
        except (UnicodeError, ValueError):  # a session id SQLite cannot store: record it without
            _record(store, vendor, reason, detail, None, err)
        return
    session_id, moment, agent_id, _ = parsed
    if vendor == "hermes" and moment == "on_session_finalize" and not store.seen(session_id):
        return  # Hermes finalizes ids it never ran (a mistyped --resume): see hermes.py
    claim = store.claim(vendor, session_id, moment, agent_id=agent_id)
    if claim.reply is None:
        return
    try:
        out.write(encode_reply(claim.reply))
        out.flush()
    except BaseException as exc:
        store.abandon(claim, "reply-not-written")
        if isinstance(exc, Exception):
            _say(err, f"the reply could not be written: {exc}")
            return
        raise
    if trace is not None:  # crash tests: the reply is out, the delivery not yet confirmed
        trace("replied")
    try:
        store.confirm(claim)
    except StoreError:
        _UNCONFIRMED.append(claim)
        raise


def deliver_in_process(
    vendor: str,
    session_id: str,
    moment: str,
    *,
    store_path: str | None = None,
    dsn: str | None = None,
    stderr: IO[str] | None = None,
    agent_id: str | None = None,
) -> dict[str, object] | None:
    """One hook moment for a vendor whose hook is a function call (Hermes plugins, the Agent SDK).

    Claims, confirms, and returns the reply for the caller to hand back to the vendor
    at once (``None``: nothing to say). Never raises: a failure of its own is recorded
    and answered with ``None``, exactly as the hook command. A confirm that finds the
    store locked is retried at this process's next moment (the reply is returned).
    """
    err = stderr if stderr is not None else sys.stderr
    try:
        store = open_store(store_path, dsn=dsn, busy_timeout=HOOK_BUSY_TIMEOUT)
    except (StoreError, ValueError) as exc:
        _say(err, str(exc))
        return None
    try:
        while _UNCONFIRMED:
            store.confirm(_UNCONFIRMED[0])
            del _UNCONFIRMED[0]
        claim = store.claim(vendor, session_id, moment, agent_id=agent_id)
        if claim.reply is None:
            return None
        try:
            store.confirm(claim)
        except StoreError:
            _UNCONFIRMED.append(claim)
        return claim.reply
    except StoreError as exc:
        _say(err, str(exc))
        return None
    except Exception as exc:
        _record(store, vendor, "internal-error", repr(exc), None, err)
        return None
    finally:
        store.close()


def record_failure(
    vendor: str | None,
    reason: str,
    detail: str,
    *,
    session_id: str | None = None,
    store_path: str | None = None,
    dsn: str | None = None,
    stderr: IO[str] | None = None,
) -> None:
    """Record a failure found before a moment could be handled (``hook.failed``). Never raises.

    For callers that have no store open yet: the Hermes plugin called without a
    session id, a hook config that runs ``live-steering hook`` without its VENDOR.
    When the store itself cannot be used, the failure goes to stderr only.
    """
    err = stderr if stderr is not None else sys.stderr
    try:
        store = open_store(store_path, dsn=dsn, busy_timeout=HOOK_BUSY_TIMEOUT)
    except Exception as exc:
        _say(err, f"{reason}: {detail} (and it could not be recorded: {exc})")
        return
    try:
        _record(store, vendor, reason, detail, session_id, err)
    finally:
        store.close()
