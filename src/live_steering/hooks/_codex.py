"""What the installed Codex says about its hooks: ``hooks/list`` of ``codex app-server``.

Codex (0.171.0) runs a hook only once the user has trusted it: trust is persisted per hook in
``$CODEX_HOME/config.toml`` as ``[hooks.state."<key>"] trusted_hash = "sha256:..."``, the key
naming the hooks file, the event and the entry, the hash covering the hook's definition (so
rewriting the hook, e.g. a new ``--store``, makes it untrusted again). The interactive
``codex`` asks at start ("Hooks need review ... Trust all and continue") and ``/hooks``
manages them; ``codex exec`` never asks and skips untrusted hooks without a word
(``--dangerously-bypass-hook-trust`` runs them for one invocation). The app-server's
``hooks/list`` reports each hook with its ``trustStatus`` (``trusted``, ``untrusted``,
``modified``, ``managed``) and ``currentHash``: ``hooks doctor`` reads it here, the same
answer the TUI reads. Standard library only; a bounded wait; never raises past ``CodexError``.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import time
from typing import Any

from .._errors import LiveSteeringError

__all__ = ["CodexError", "hooks_list"]

LIST_TIMEOUT = 30.0


class CodexError(LiveSteeringError):
    """``codex app-server`` could not answer ``hooks/list`` (not installed, too old, timed out)."""


def hooks_list(
    codex: str, *, env: dict[str, str] | None = None, cwd: str | None = None, timeout: float = LIST_TIMEOUT
) -> list[dict[str, Any]]:
    """Every hook the installed Codex sees for ``cwd`` (its ``hooks/list`` entries, trust included)."""
    try:
        proc = subprocess.Popen(
            [codex, "app-server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
        )
    except OSError as exc:
        raise CodexError(f"cannot run {codex} app-server: {exc}") from exc
    assert proc.stdin is not None
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buffer = b""
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)

    def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        proc.stdin.flush()

    def answer(request_id: int) -> dict[str, Any]:
        nonlocal buffer
        while True:
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if isinstance(message, dict) and message.get("id") == request_id:
                    return message
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise CodexError(f"{codex} app-server did not answer within {timeout:.0f} s")
            chunk = os.read(proc.stdout.fileno(), 1 << 16)  # type: ignore[union-attr]
            if not chunk:
                raise CodexError(f"{codex} app-server exited before answering")
            buffer += chunk

    try:
        send(
            {
                "id": 1,
                "method": "initialize",
                "params": {"clientInfo": {"name": "live-steering", "version": "0"}},
            }
        )
        answer(1)
        send({"method": "initialized"})
        send({"id": 2, "method": "hooks/list", "params": {"cwds": [cwd or os.getcwd()]}})
        reply = answer(2)
    except (OSError, ValueError) as exc:
        raise CodexError(f"{codex} app-server: {exc}") from exc
    finally:
        selector.close()
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    if "error" in reply:
        raise CodexError(f"hooks/list failed: {reply['error']}")
    try:
        return [hook for entry in reply["result"]["data"] for hook in entry["hooks"]]
    except (KeyError, TypeError) as exc:
        raise CodexError(f"hooks/list answered an unexpected shape ({exc!r})") from exc


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string (JSON's escapes are TOML's for these characters)."""
    return json.dumps(text, ensure_ascii=False)
