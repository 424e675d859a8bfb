"""Claude Code's versions: which hook moments each release accepts, and which ones the install wires.

Claude Code rejects a hook config that names a moment it does not know: 2.1.197 shows a
settings warning dialog at every interactive start for ``PostModelSwitch``, which only
later versions know. So ``hooks install claude-code`` asks the installed CLI for its
version (``claude --version``) and wires only the moments of the table row for that
version. A row is the list of hook events read from that release's own CLI (its
hook-event enum); docs/hooks.md cites each one.

The install wires as few moments as delivery needs (every hook moment is a process
start): per tool round one moment, plus the session's start, prompt, stop and end.

This module decides nothing at hook time: only ``hooks install`` reads it. The data is
keyed by vendor name so that other vendors' tables can sit beside it, but only Claude
Code's lives here (the other vendors' version tables are their own).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence

__all__ = ["TABLES", "Release", "Wiring", "detect_version", "parse_version", "wiring"]

Version = tuple[int, ...]


def parse_version(text: str) -> Version | None:
    """The leading ``X.Y.Z`` of a ``--version`` line as a tuple, or ``None``.

    >>> parse_version("2.1.197 (Claude Code)")
    (2, 1, 197)
    """
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if match is None:
        return None
    return tuple(int(part) for part in match.groups(default="0"))


class Release:
    """One row of a vendor's table: from ``since`` on (until the next row), these moments exist."""

    __slots__ = ("known", "since", "source")

    def __init__(self, since: str, known: Sequence[str], source: str) -> None:
        self.since = parse_version(since) or (0,)
        self.known = frozenset(known)
        """Every hook moment this release accepts in its settings."""
        self.source = source
        """Where the row comes from (cited in docs/hooks.md)."""


_CLAUDE_2_1_197 = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "Notification",
    "UserPromptSubmit",
    "UserPromptExpansion",
    "SessionStart",
    "SessionEnd",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "PermissionRequest",
    "PermissionDenied",
    "Setup",
    "TeammateIdle",
    "TaskCreated",
    "TaskCompleted",
    "Elicitation",
    "ElicitationResult",
    "ConfigChange",
    "WorktreeCreate",
    "WorktreeRemove",
    "InstructionsLoaded",
    "CwdChanged",
    "FileChanged",
    "MessageDisplay",
)
_CLAUDE_2_1_332 = (
    *_CLAUDE_2_1_197,
    "PreModelSwitch",
    "PostModelSwitch",
    "DirectoryAdded",
    "PreSkillShellCommand",
)

#: Each vendor's releases, oldest first. Claude Code: the hook-event enum of the CLI of each
#: release (``@anthropic-ai/claude-code`` 2.1.197 and 2.1.332 from the npm registry). A version
#: older than the first row gets ``FALLBACK``: the moments of the hooks reference's first
#: release of hooks, which every later version keeps.
TABLES: Mapping[str, tuple[Release, ...]] = {
    "claude-code": (
        Release(
            "2.1.197", _CLAUDE_2_1_197, "the hook-event list of the @anthropic-ai/claude-code 2.1.197 CLI"
        ),
        Release(
            "2.1.332", _CLAUDE_2_1_332, "the hook-event list of the @anthropic-ai/claude-code 2.1.332 CLI"
        ),
    ),
}
FALLBACK: Mapping[str, frozenset[str]] = {
    "claude-code": frozenset(
        {
            "PreToolUse",
            "PostToolUse",
            "Notification",
            "UserPromptSubmit",
            "Stop",
            "SubagentStop",
            "SessionStart",
            "SessionEnd",
        }
    ),
}
#: The command that prints each vendor's version, and the binary's usual name.
VERSION_COMMANDS: Mapping[str, tuple[str, ...]] = {"claude-code": ("claude", "--version")}
#: The binary to ask instead of the one on PATH (as ``$LIVE_STEERING_CODEX`` for Codex).
ENV_OVERRIDE: Mapping[str, str] = {"claude-code": "LIVE_STEERING_CLAUDE"}

#: What the default install wires, in order of preference per role: the first moment of a
#: role that the release knows is wired. One moment per tool round (``PostToolBatch``: once
#: after all the round's tool results, before the next request; older CLIs: ``PostToolUse``
#: and its failure twin, once per tool call), the prompt, the stop (steers that arrive during
#: the final answer, and follow-ups), the session's start (a resumed session) and its end.
ROLES: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "claude-code": (
        ("SessionStart",),
        ("UserPromptSubmit",),
        ("PostToolBatch", "PostToolUse"),
        ("Stop",),
        ("SessionEnd",),
    ),
}
#: Moments that come with another in a role: a tool call that fails runs PostToolUseFailure
#: instead of PostToolUse.
COMPANIONS: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "claude-code": {"PostToolUse": ("PostToolUseFailure",)},
}


def detect_version(vendor: str, binary: str | None = None, *, timeout: float = 20.0) -> str | None:
    """The installed CLI's version line (``claude --version``), or ``None`` when it does not run."""
    command = VERSION_COMMANDS.get(vendor)
    if command is None:
        return None
    argv = [binary or os.environ.get(ENV_OVERRIDE.get(vendor, ""), "") or command[0], *command[1:]]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    line = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    return line if done.returncode == 0 and parse_version(line) is not None else None


class Wiring:
    """What ``hooks install`` wires for one vendor version, and why."""

    __slots__ = ("known", "moments", "note", "version")

    def __init__(
        self, moments: list[str], known: frozenset[str] | None, version: str | None, note: str | None
    ) -> None:
        self.moments = moments
        """The moments to wire, in config order."""
        self.known = known
        """Every moment that version accepts (``None``: the vendor has no table)."""
        self.version = version
        """The version the wiring is for (``None``: not detected)."""
        self.note = note
        """A line for the person installing (no CLI found, an older version), or ``None``."""


def wiring(vendor: str, version: str | tuple[int, ...] | None, default: Sequence[str]) -> Wiring:
    """The moments to wire for ``vendor`` at ``version`` (``default``: the wiring of a vendor
    with no table). A version of no row, or none detected, gets the oldest row's wiring.

    >>> wiring("claude-code", "2.1.197", []).moments
    ['SessionStart', 'UserPromptSubmit', 'PostToolBatch', 'Stop', 'SessionEnd']
    >>> wiring("claude-code", "2.0.0", []).moments
    ['SessionStart', 'UserPromptSubmit', 'PostToolUse', 'Stop', 'SessionEnd']
    """
    shown = ".".join(map(str, version)) if isinstance(version, tuple) else version
    table = TABLES.get(vendor)
    if table is None:
        return Wiring(list(default), None, shown, None)
    note = None
    parsed = parse_version(shown) if shown is not None else None
    if parsed is None:
        known = table[0].known
        note = (
            f"no {vendor} CLI found to ask its version: wiring the moments {vendor} "
            f"{'.'.join(map(str, table[0].since))} accepts (pass --client-version X.Y.Z or --client PATH)"
        )
    elif parsed < table[0].since:
        known = FALLBACK[vendor]
        note = (
            f"{vendor} {shown} is older than {'.'.join(map(str, table[0].since))}, the oldest version "
            "whose hook moments are known here: wiring only the moments every version accepts"
        )
    else:
        known = [row for row in table if row.since <= parsed][-1].known
    moments: list[str] = []
    for role in ROLES[vendor]:
        for moment in role:
            if moment in known:
                moments.append(moment)
                moments += [m for m in COMPANIONS.get(vendor, {}).get(moment, ()) if m in known]
                break
    return Wiring(moments, known, shown, note)
