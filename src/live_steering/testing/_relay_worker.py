"""Worker processes for the hook relay's concurrency and crash tests. Testing aid only.

    python -m live_steering.testing._relay_worker hook VENDOR STORE          < hook.json
    python -m live_steering.testing._relay_worker hooks VENDOR STORE PAYLOADS_JSON TOTAL
    python -m live_steering.testing._relay_worker instruct STORE PLAN_FILE

``hook`` is ``live-steering hook`` (the same ``run_hook``) with a kill switch:
``LIVE_STEERING_KILL=POINT:N`` SIGKILLs the process at the N-th occurrence of POINT,
one of ``claim`` (inside the claim transaction, nothing written yet),
``before-commit`` (a transaction's statements ran, ``COMMIT`` not issued),
``claimed`` (the claim is durable, no reply written), ``replied`` (the reply is
flushed, the delivery not confirmed), ``finish`` (inside the confirm transaction),
``enqueue`` (inside an instruct transaction).

``hooks`` is a long-lived hook process: it runs hook moments (the payloads in turn)
through ``run_hook`` until TOTAL instructions of the store are delivered, printing
each reply as one JSON line ``{"session_id", "reply"}``.

STORE is a SQLite path, or ``pg:`` followed by a PostgreSQL DSN.

``instruct`` sends the plan in PLAN_FILE, JSON ``[[session_id, command_id, text], ...]``, in order with
``instruct()``, retrying one that is refused ``queue-full`` until it is accepted;
it prints one JSON line per receipt.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import sys
import time

from ..hooks._command import run_hook
from ._journal_writer import KILL_ENV, KillSwitch

KILL_POINTS = ("claim", "before-commit", "claimed", "replied", "finish", "enqueue")


def _where(store: str) -> tuple[str | None, str | None]:
    """STORE as (path, dsn)."""
    return (None, store[3:]) if store.startswith("pg:") else (store, None)


def _delivered(store: str) -> int:
    _, dsn = _where(store)
    if dsn is not None:
        from ..hooks._open import open_store

        with open_store(dsn=dsn) as opened:
            return sum(1 for row in opened.instructions() if row["state"] == "delivered")
    conn = sqlite3.connect(store, timeout=5.0)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM instructions WHERE state = 'delivered'").fetchone()[0])
    finally:
        conn.close()


def hooks_loop(vendor: str, store: str, payloads: list[dict[str, object]], total: int) -> None:
    turn = 0
    path, dsn = _where(store)
    while True:
        payload = payloads[turn % len(payloads)]
        turn += 1
        out = io.BytesIO()
        stdin = io.BytesIO(json.dumps(payload).encode())
        err = io.StringIO()
        run_hook(vendor, store_path=path, dsn=dsn, stdin=stdin, stdout=out, stderr=err)
        if out.getvalue():
            reply = json.loads(out.getvalue())
            print(json.dumps({"session_id": payload["session_id"], "reply": reply}), flush=True)
        if err.getvalue():
            print(json.dumps({"stderr": err.getvalue()}), flush=True)
        if turn % len(payloads) == 0 and _delivered(store) >= total:
            return


def instruct_loop(store: str, plan: list[list[str]], switch: KillSwitch) -> None:
    from ..hooks._open import open_store

    path, dsn = _where(store)
    opened = open_store(path, dsn=dsn, trace=switch)
    with opened:
        for session_id, command_id, text in plan:
            while True:
                receipt = opened.enqueue(session_id, command_id, text)
                if receipt.accepted or receipt.reason != "queue-full":
                    break
                time.sleep(0.002)  # a full queue drains as hook processes deliver; poll again
            print(
                json.dumps({"command_id": command_id, "state": receipt.state, "reason": receipt.reason}),
                flush=True,
            )


def main(argv: list[str]) -> int:
    switch = KillSwitch(os.environ.get(KILL_ENV), KILL_POINTS)
    mode = argv[0]
    if mode == "hook":
        path, dsn = _where(argv[2])
        return run_hook(argv[1], store_path=path, dsn=dsn, trace=switch)
    if mode == "hooks":
        hooks_loop(argv[1], argv[2], json.loads(argv[3]), int(argv[4]))
        return 0
    if mode == "instruct":
        with open(argv[2], encoding="utf-8") as plan:
            instruct_loop(argv[1], json.load(plan), switch)
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
