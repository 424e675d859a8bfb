"""A Hermes plugin that steers a Hermes session from the relay's store.

Hermes reads extra context from the return value of a plugin's ``pre_llm_call``
hook (``{"context": ...}``, joined into the user message at the start of a turn),
and ends a session for good at ``on_session_finalize`` (``on_session_end`` fires per
turn). This module is such a plugin: ``register(ctx)`` is the entry point the Hermes
plugin loader calls. At ``pre_llm_call`` it claims the session's queued
instructions from the same store ``live-steering instruct`` writes to; at
``on_session_finalize`` it drops what is still queued (audited). A failure of its
own is recorded and answered with ``None`` (Hermes carries on as if the plugin had
nothing to say).

Install it as a directory plugin with ``live-steering hooks install hermes --plugin``
(see docs/hooks.md). The store is ``$LIVE_STEERING_STORE`` or the XDG default,
or the plugin setting ``store`` (``plugins.entries.live-steering.store`` in Hermes's
``config.yaml``, read by ``register``).
"""

from __future__ import annotations

import os
from typing import IO, Any, cast

from ._command import deliver_in_process, record_failure

__all__ = ["HermesSteering", "register"]


class _Log:
    """A stderr stand-in that appends to a log file: Hermes's terminal is the user's, not ours."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, text: str) -> int:
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(text)
        except OSError:
            pass  # nowhere to say it: never break Hermes over a log line
        return len(text)

    def flush(self) -> None:
        pass


def default_log_path() -> str:
    """``$HERMES_HOME/logs/live-steering.log`` (``~/.hermes`` without ``HERMES_HOME``)."""
    home = os.environ.get("HERMES_HOME", "").strip() or os.path.expanduser("~/.hermes")
    return os.path.join(home, "logs", "live-steering.log")


class HermesSteering:
    """The hook callbacks, bound to one store path (``None``: the default store).

    What the relay cannot record in the store (the store itself unusable) goes to
    ``log_path`` (default ``default_log_path()``), never to Hermes's terminal.
    """

    def __init__(self, store_path: str | None = None, *, log_path: str | None = None) -> None:
        self.store_path = store_path
        self.log = cast(IO[str], _Log(log_path or default_log_path()))

    def _moment(self, moment: str, kwargs: dict[str, Any]) -> dict[str, object] | None:
        session_id = kwargs.get("session_id")
        if not isinstance(session_id, str) or not session_id:
            got = "no session_id" if session_id is None else f"session_id {type(session_id).__name__}"
            record_failure(
                "hermes",
                "missing-session-id",
                f"Hermes called {moment} with {got} (keyword arguments: {', '.join(sorted(kwargs))[:300]})",
                store_path=self.store_path,
                stderr=self.log,
            )
            return None
        return deliver_in_process("hermes", session_id, moment, store_path=self.store_path, stderr=self.log)

    def pre_llm_call(self, **kwargs: Any) -> dict[str, object] | None:
        """Return ``{"context": <queued instructions>}`` for this turn, or ``None``."""
        return self._moment("pre_llm_call", kwargs)

    def on_session_start(self, **kwargs: Any) -> None:
        """A session starts (or a finalized one comes back): reopen it, so it can be steered at once."""
        self._moment("on_session_start", kwargs)

    def on_session_finalize(self, **kwargs: Any) -> None:
        """The session ended for good: drop its queued instructions (audited).

        Hermes also finalizes a session it never ran: ``hermes chat --resume ID`` with an id
        that does not exist prints "Session not found" and fires ``on_session_finalize`` for
        that id. A session no hook has ever been recorded for (``HookStore.seen``) is left
        alone, so a mistyped resume neither ends a session nor drops what a host queued.
        """
        session_id = kwargs.get("session_id")
        if isinstance(session_id, str) and session_id and not self._seen(session_id):
            return
        self._moment("on_session_finalize", kwargs)

    def _seen(self, session_id: str) -> bool:
        """Whether a hook of the session ran before; True when the store cannot say (then as before)."""
        from ._open import open_store
        from ._store import HOOK_BUSY_TIMEOUT

        try:
            store = open_store(self.store_path, busy_timeout=HOOK_BUSY_TIMEOUT)
        except Exception:
            return True
        try:
            return store.seen(session_id)
        except Exception:
            return True
        finally:
            store.close()

    def register(self, ctx: Any) -> None:
        """Register the three callbacks with a Hermes plugin context."""
        ctx.register_hook("pre_llm_call", self.pre_llm_call)
        ctx.register_hook("on_session_start", self.on_session_start)
        ctx.register_hook("on_session_finalize", self.on_session_finalize)


def configured_store(ctx: Any) -> str | None:
    """The plugin setting ``store``: ``plugins.entries.<plugin id>.store`` in Hermes's
    ``config.yaml``, or ``None``. Hermes 0.19.0 gives a plugin no accessor for its settings
    (its ``PluginContext`` has none); its own plugin code reads ``plugins.entries.<id>`` through
    ``hermes_cli.config.load_config``, the id being the manifest's ``key`` or ``name``. Read the
    same way here; anything missing or unreadable is ``None`` (the default store)."""
    try:
        import importlib  # Hermes's own module, there only inside Hermes

        config = importlib.import_module("hermes_cli.config").load_config() or {}
    except Exception:
        return None
    manifest = getattr(ctx, "manifest", None)
    plugin_id = getattr(manifest, "key", None) or getattr(manifest, "name", None) or "live-steering"
    plugins = config.get("plugins") if isinstance(config, dict) else None
    entries = plugins.get("entries") if isinstance(plugins, dict) else None
    entry = entries.get(plugin_id) if isinstance(entries, dict) else None
    store = entry.get("store") if isinstance(entry, dict) else None
    return store if isinstance(store, str) and store else None


def register(ctx: Any) -> None:
    """The Hermes plugin entry point: ``pre_llm_call``, ``on_session_start``, ``on_session_finalize``,
    on the store of the plugin setting ``store`` (``configured_store``), else the default store."""
    HermesSteering(configured_store(ctx)).register(ctx)
