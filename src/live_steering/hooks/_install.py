"""The hook configuration each vendor needs to run ``live-steering hook``, and a safe merge.

``config_block(vendor, store)`` is the exact block ``live-steering hooks install``
prints: every eligible moment of the vendor plus its session-end moment, each
running the hook command with ``--store`` baked in. ``merge_into(path, ...)``
writes it into an existing config file: the user's other hooks stay, earlier
live-steering entries are replaced (so installing twice changes nothing), the old
file is copied to ``PATH.bak`` first, and the new one replaces it atomically.
File formats are cited in docs/hooks.md.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from typing import Any

from . import _vendors

__all__ = ["CONFIG_FILES", "InstallError", "config_block", "hook_command", "merge_into", "moments"]

#: Where each vendor reads hook configuration (user-level; project-level paths in docs/hooks.md).
CONFIG_FILES = {
    "claude-code": "~/.claude/settings.json",
    "codex": "~/.codex/hooks.json",
    "qwen-code": "~/.qwen/settings.json",
    "vscode": ".github/hooks/live-steering.json",
    "hermes": "~/.hermes/config.yaml",
}
#: Seconds a vendor lets one hook run; ours finishes well inside (it waits 1 s for a lock at most).
HOOK_TIMEOUT_SECONDS = 10
MARKERS = ("live-steering hook", "live_steering._cli hook")


class InstallError(Exception):
    """The config file cannot be merged safely (not JSON, not an object, YAML with hooks already)."""


def moments(vendor: str) -> list[str]:
    """The moments the config wires: the eligible ones, then the session-end moment, sorted."""
    facts = _vendors.FACTS[vendor]
    wired = sorted(facts.context_moments)
    if facts.session_end_moment is not None:
        wired.append(facts.session_end_moment)
    return wired


def hook_command(vendor: str, store: str | None, dsn: str | None = None) -> str:
    """The shell command the vendor runs: the installed ``live-steering`` script, absolute.

    ``dsn``: a PostgreSQL store, baked in as ``--dsn`` (mind a password in it: prefer a
    passfile or ``$LIVE_STEERING_STORE_DSN``, see docs/hooks.md).
    """
    script = shutil.which("live-steering")
    if script is None:
        candidate = os.path.join(os.path.dirname(sys.executable), "live-steering")
        script = candidate if os.path.exists(candidate) else None
    argv = (
        [script, "hook", vendor] if script else [sys.executable, "-m", "live_steering._cli", "hook", vendor]
    )
    if store is not None:
        argv += ["--store", os.path.abspath(store)]
    if dsn is not None:
        argv += ["--dsn", dsn]
    return shlex.join(argv)


def _entry(vendor: str, command: str) -> dict[str, Any]:
    if vendor == "qwen-code":  # Qwen Code's timeout is in milliseconds
        return {
            "type": "command",
            "command": command,
            "name": "live-steering",
            "timeout": HOOK_TIMEOUT_SECONDS * 1000,
        }
    return {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_SECONDS}


def config_block(vendor: str, store: str | None, dsn: str | None = None) -> dict[str, Any] | str:
    """The vendor's config: a JSON object, or for Hermes the YAML text of its ``hooks:`` section."""
    if vendor not in _vendors.FACTS:
        raise ValueError(f"unknown vendor {vendor!r}; expected one of {', '.join(_vendors.FACTS)}")
    command = hook_command(vendor, store, dsn)
    if vendor == "hermes":
        lines = ["hooks:"]
        for moment in moments(vendor):
            lines += [
                f"  {moment}:",
                f"    - command: {json.dumps(command)}",
                f"      timeout: {HOOK_TIMEOUT_SECONDS}",
            ]
        return "\n".join(lines) + "\n"
    if vendor == "vscode":  # VS Code: a flat list of commands per event, no matcher groups
        return {"hooks": {m: [_entry(vendor, command)] for m in moments(vendor)}}
    return {"hooks": {m: [{"hooks": [_entry(vendor, command)]}] for m in moments(vendor)}}


def _ours(entry: object) -> bool:
    text = json.dumps(entry)
    return any(marker in text for marker in MARKERS)


def _backup(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    backup = path + ".bak"
    shutil.copy2(path, backup)
    return backup


def _replace(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def merge_into(path: str, vendor: str, store: str | None, dsn: str | None = None) -> str | None:
    """Merge the vendor's block into the config file at ``path``; returns the backup's path.

    Raises ``InstallError`` (and changes nothing) when the file cannot be merged safely.
    """
    block = config_block(vendor, store, dsn)
    existing = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            existing = f.read()
    if isinstance(block, str):  # Hermes: YAML, merged only where no hooks section exists yet
        if any(line.startswith("hooks:") for line in existing.splitlines()):
            raise InstallError(
                f"{path} already has a hooks: section; add the printed entries to it by hand "
                "(or use the Hermes plugin, see docs/hooks.md)"
            )
        merged_text = existing + ("\n" if existing and not existing.endswith("\n") else "") + block
    else:
        try:
            config = json.loads(existing) if existing.strip() else {}
        except ValueError as exc:
            raise InstallError(f"{path} is not JSON ({exc}); nothing was changed") from exc
        if not isinstance(config, dict) or not isinstance(config.get("hooks", {}), dict):
            raise InstallError(f"{path}: expected a JSON object with a 'hooks' object; nothing was changed")
        hooks = config.setdefault("hooks", {})
        for moment, entries in block["hooks"].items():
            current = hooks.get(moment, [])
            if not isinstance(current, list):
                raise InstallError(f"{path}: hooks.{moment} is not a list; nothing was changed")
            hooks[moment] = [e for e in current if not _ours(e)] + entries
        merged_text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    backup = _backup(path)
    _replace(path, merged_text)
    return backup


HERMES_PLUGIN_DIR = "~/.hermes/plugins/live-steering"


def write_hermes_plugin(directory: str, store: str | None) -> list[str]:
    """Write the Hermes directory plugin (``plugin.yaml`` + ``__init__.py``) into ``directory``.

    Its ``register(ctx)`` is ``live_steering.hooks.hermes.register`` with ``store``
    baked in, so Hermes must run in a Python environment where live-steering is
    installed. Hermes loads a standalone plugin once it is named under
    ``plugins: enabled:`` in its ``config.yaml``. Returns the files written.
    """
    from .. import __version__

    directory = os.path.expanduser(directory)
    os.makedirs(directory, exist_ok=True)
    manifest = (
        "name: live-steering\n"
        f"version: {__version__}\n"
        "description: Steer this session with live-steering instruct (pre_llm_call context; "
        "dropped at on_session_finalize)\n"
        "provides_hooks:\n"
        "  - pre_llm_call\n"
        "  - on_session_finalize\n"
    )
    store_repr = repr(os.path.abspath(store)) if store is not None else "None"
    init = (
        '"""live-steering for Hermes: written by `live-steering hooks install hermes --plugin`."""\n\n'
        "from live_steering.hooks.hermes import HermesSteering\n\n\n"
        "def register(ctx):\n"
        f"    steering = HermesSteering({store_repr})\n"
        '    ctx.register_hook("pre_llm_call", steering.pre_llm_call)\n'
        '    ctx.register_hook("on_session_finalize", steering.on_session_finalize)\n'
    )
    written = []
    for name, text in (("plugin.yaml", manifest), ("__init__.py", init)):
        path = os.path.join(directory, name)
        _backup(path)
        _replace(path, text)
        written.append(path)
    return written
