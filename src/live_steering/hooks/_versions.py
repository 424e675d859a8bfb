"""Which moments a vendor's *installed version* accepts, and how to find that version.

``hooks install VENDOR`` wires only moments the installed CLI knows (a moment a version does
not know is at best ignored, at worst a settings warning on every start), in the timeout
unit that version reads. The facts live in one table per vendor, a row per version range,
each row naming where it was read (the installed CLI's own schema, source or ``--help``);
docs/hooks.md repeats the tables. ``detect(vendor)`` runs the vendor's ``--version`` (bounded)
and parses it; ``support`` says whether that version is one the real-client tests run. Every
vendor with a CLI to ask (Claude Code, Codex, Qwen Code, Hermes) has a table here; the VS Code
agent, which has none, keeps the plain adoption map of ``_vendors.py``.

Claude Code rejects a hook config that names a moment it does not know (2.1.197 shows a
settings warning dialog at every interactive start for ``PostModelSwitch``, which only later
versions know), so its rows also record every moment that version knows (``Wiring.known``,
read from that release's own hook-event enum), and ``hooks doctor`` fails a config naming
another.

Standard library only; never imported by the hook command.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

__all__ = [
    "COMMANDS",
    "TABLES",
    "Version",
    "Wiring",
    "detect",
    "env_override",
    "parse_version",
    "shown",
    "support",
    "verified_versions",
    "wiring",
]

Version = tuple[int, int, int]

#: The command that reports each vendor's version (``COMMAND --version``).
COMMANDS = {"claude-code": "claude", "codex": "codex", "qwen-code": "qwen", "hermes": "hermes"}
VERSION_TIMEOUT = 20.0


def env_override(vendor: str) -> str:
    """The variable naming the CLI to ask instead of the one on PATH: ``LIVE_STEERING_<COMMAND>``.

    >>> env_override("claude-code"), env_override("qwen-code")
    ('LIVE_STEERING_CLAUDE', 'LIVE_STEERING_QWEN')
    """
    return f"LIVE_STEERING_{COMMANDS.get(vendor, vendor).upper().replace('-', '_')}"


def shown(version: Version) -> str:
    """``(2, 1, 197)`` as ``2.1.197``."""
    return ".".join(map(str, version))


class Wiring:
    """One row of a vendor's table: what to wire for versions ``minimum`` and up (to the next row)."""

    __slots__ = (
        "known",
        "minimum",
        "moments",
        "source",
        "timeout_ms",
        "timeouts",
        "trust_required",
        "verified",
    )

    def __init__(
        self,
        minimum: Version,
        moments: tuple[str, ...],
        *,
        source: str,
        known: tuple[str, ...] | None = None,
        timeouts: dict[str, int] | None = None,
        timeout_ms: bool = False,
        trust_required: bool = False,
        verified: tuple[Version, ...] | None = None,
    ) -> None:
        self.minimum = minimum
        """The oldest version this row is for."""
        self.verified = (minimum,) if verified is None else verified
        """The versions of this row the real-client tests run (default: ``minimum``; none: read
        from the vendor's bundle or docs only)."""
        self.moments = moments
        """The moments written to the config, in order."""
        self.known = None if known is None else frozenset(known)
        """Every moment these versions accept in their config, where it was recorded (Claude Code:
        a config naming another is a settings warning); ``None``: not recorded."""
        self.source = source
        """Where the row's facts were read."""
        self.timeouts = dict(timeouts or {})
        """Seconds per moment where it differs from the default (a vendor that clamps a moment)."""
        self.timeout_ms = timeout_ms
        """The vendor reads ``timeout`` as milliseconds (else seconds)."""
        self.trust_required = trust_required
        """The vendor runs no hook until the user has trusted it (Codex)."""

    def __repr__(self) -> str:
        return f"Wiring({shown(self.minimum)}+)"


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
#: Claude Code: one moment per tool round (``PostToolBatch``: once after all the round's tool
#: results, before the next request), the prompt, the stop (steers that arrive during the final
#: answer, and follow-ups), the session's start (a resumed session) and its end.
_CLAUDE_WIRED = ("SessionStart", "UserPromptSubmit", "PostToolBatch", "Stop", "SessionEnd")

#: What delivery needs, no more (every hook moment is a process): an instruction queued at
#: any time reaches the next model request through UserPromptSubmit (a turn's start, a
#: resume) or PostToolUse (after each tool; Qwen Code: PostToolBatch, after each round).
#: SessionStart and PreToolUse also carry context on these vendors but always fire right
#: before one of those two, so wiring them adds processes, not delivery. Stop is the follow-up
#: moment (its block decision), wired where the vendor has one. Per vendor, rows
#: oldest first; the last row is the version the real-client tests run. An older version
#: gets the row of its range and ``hooks doctor`` calls it older than verified; a newer one
#: gets the last row, "newer".
TABLES: dict[str, tuple[Wiring, ...]] = {
    "claude-code": (
        # Before 2.1.197: not run here; the moments of the hooks reference's first release of
        # hooks, which every later version keeps (PostToolUse, once per tool call).
        Wiring(
            (0, 0, 0),
            ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd"),
            known=(
                "PreToolUse",
                "PostToolUse",
                "Notification",
                "UserPromptSubmit",
                "Stop",
                "SubagentStop",
                "SessionStart",
                "SessionEnd",
            ),
            source="the Claude Code hooks reference: the events of the first release of hooks",
            verified=(),
        ),
        Wiring(
            (2, 1, 197),
            _CLAUDE_WIRED,
            known=_CLAUDE_2_1_197,
            source="the hook-event list of the @anthropic-ai/claude-code 2.1.197 CLI",
        ),
        Wiring(
            (2, 1, 332),
            _CLAUDE_WIRED,
            known=_CLAUDE_2_1_332,
            source="the hook-event list of the @anthropic-ai/claude-code 2.1.332 CLI",
        ),
    ),
    "codex": (
        Wiring(
            (0, 171, 0),
            ("UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd"),
            source=(
                "codex 0.171.0: the hook JSON schemas embedded in the binary (*.command.output: "
                "additionalContext on SessionStart, UserPromptSubmit, PreToolUse, PostToolUse, "
                "SubagentStart; decision 'block' with a reason on Stop, the follow-up moment), "
                "its app-server HookEventName list, and the warning "
                "'clamping SessionEnd hook timeout to 3s'"
            ),
            timeouts={"SessionEnd": 3},
            trust_required=True,
        ),
    ),
    "qwen-code": (
        # Before 0.21: no PostToolBatch (0.15.10's HookEventName has 14 moments), timeouts in
        # milliseconds (DEFAULT_HOOK_TIMEOUT = 6e4); not run here.
        Wiring(
            (0, 0, 0),
            ("UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "SessionEnd"),
            source="qwen-code 0.15.10: HookEventName (14 moments), DEFAULT_HOOK_TIMEOUT = 6e4 (milliseconds)",
            timeout_ms=True,
            verified=(),
        ),
        # 0.21.2 (the oldest release on the registry with PostToolBatch) to 0.23.3: the 22 moments
        # of 0.24.4, timeouts still in milliseconds (DEFAULT_HOOK_TIMEOUT = 6e4 in 0.23.3's bundle).
        Wiring(
            (0, 21, 2),
            ("UserPromptSubmit", "PostToolBatch", "Stop", "SessionEnd"),
            source=(
                "qwen-code 0.21.2 and 0.23.3: HookEventName (22 moments), DEFAULT_HOOK_TIMEOUT = 6e4 "
                "(milliseconds) in their bundles; 0.21.2 run as a real client"
            ),
            timeout_ms=True,
        ),
        # 0.23.4: timeouts in seconds (packages/core/src/hooks/hook-timeout.ts first appears, a
        # value of 1000 or more read as legacy milliseconds, with a warning). PostToolBatch fires
        # once per tool round, after failed calls too (a read_file that failed validation fired no
        # PostToolUse nor PostToolUseFailure, but PostToolBatch): one process per round.
        Wiring(
            (0, 23, 4),
            ("UserPromptSubmit", "PostToolBatch", "Stop", "SessionEnd"),
            source=(
                "qwen-code 0.23.4 and 0.24.4: HookEventName (22 moments) and "
                "packages/core/src/hooks/hook-timeout.ts (timeouts in seconds, default 60) in their "
                "bundled chunks; Stop's block decision (one more turn with its reason) seen with the "
                "real CLI"
            ),
            verified=((0, 23, 4), (0, 24, 4)),
        ),
    ),
    "hermes": (
        Wiring(
            (0, 19, 0),
            ("pre_llm_call", "on_session_start", "on_session_finalize"),
            source="hermes-agent 0.19.0: VALID_HOOKS in hermes_cli/plugins.py, agent/shell_hooks.py",
        ),
    ),
}

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> Version | None:
    """The first ``X.Y.Z`` (or ``X.Y``, patch 0) in a ``--version`` output, or ``None``.

    >>> parse_version("codex-cli 0.171.0"), parse_version("Hermes Agent v0.19.0 (2026.11.3)")
    ((0, 171, 0), (0, 19, 0))
    >>> parse_version("2.1.197 (Claude Code)"), parse_version("no digits here")
    ((2, 1, 197), None)
    """
    match = _VERSION.search(text)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3] or 0))


def command_for(vendor: str) -> str | None:
    """The vendor CLI to ask: ``$LIVE_STEERING_<COMMAND>`` if set, else the one on PATH, else ``None``."""
    override = os.environ.get(env_override(vendor), "")
    if override:
        return override
    name = COMMANDS.get(vendor)
    return None if name is None else shutil.which(name)


def detect(vendor: str, command: str | None = None) -> tuple[Version | None, str]:
    """The installed version of ``vendor`` and a one-line account of how it was found.

    ``command``: the CLI to ask (``--client PATH``); else ``command_for``. ``(None, why)`` when
    the CLI is not found, fails, or its ``--version`` says nothing parseable. Bounded
    (``VERSION_TIMEOUT``); never raises.
    """
    name = COMMANDS.get(vendor, vendor)
    label = command or os.environ.get(env_override(vendor), "") or name
    command = command or command_for(vendor)
    if command is None:
        return None, f"no {name} on PATH (or ${env_override(vendor)})"
    try:
        done = subprocess.run(
            [command, "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{label} --version did not answer a version ({exc})"
    lines = [line.strip() for line in (done.stdout + "\n" + done.stderr).splitlines()]
    found = [line for line in lines if parse_version(line) is not None]
    if done.returncode != 0 or not found:
        return None, f"{label} --version did not answer a version (exit {done.returncode})"
    return parse_version(found[0]), f"{label} --version: {found[0]}"


def wiring(vendor: str, version: Version | None) -> Wiring | None:
    """The table row for ``version`` (``None``: the newest row), or ``None`` for a vendor without
    a table. A version older than every row gets the oldest row.

    >>> wiring("claude-code", (2, 1, 197)).moments
    ('SessionStart', 'UserPromptSubmit', 'PostToolBatch', 'Stop', 'SessionEnd')
    >>> wiring("claude-code", (2, 0, 0)).moments
    ('SessionStart', 'UserPromptSubmit', 'PostToolUse', 'Stop', 'SessionEnd')
    """
    rows = TABLES.get(vendor)
    if not rows:
        return None
    if version is None:
        return rows[-1]
    chosen = rows[0]
    for row in rows:
        if version >= row.minimum:
            chosen = row
    return chosen


def verified_versions(vendor: str) -> tuple[Version, ...]:
    """Every version of ``vendor`` the real-client tests run, oldest first."""
    return tuple(sorted(v for row in TABLES.get(vendor, ()) for v in row.verified))


def shown_versions(vendor: str) -> str:
    """``verified_versions`` as text: ``0.21.2, 0.23.4, 0.24.4``."""
    return ", ".join(shown(v) for v in verified_versions(vendor))


def support(vendor: str, version: Version | None) -> str:
    """``supported`` (a verified version's minor series, from that version up), ``older`` (before
    the oldest verified), ``newer`` (past the newest verified series), ``unverified`` (between
    verified versions, in no verified series), or ``unknown``.

    >>> support("codex", (0, 171, 0)), support("codex", (0, 160, 2)), support("codex", (0, 180, 0))
    ('supported', 'older', 'newer')
    >>> support("qwen-code", (0, 21, 9)), support("qwen-code", (0, 22, 0)), support("qwen-code", (0, 24, 9))
    ('supported', 'unverified', 'supported')
    >>> support("claude-code", (2, 1, 250)), support("claude-code", (1, 0, 80))
    ('supported', 'older')
    """
    verified = verified_versions(vendor)
    if not verified or version is None:
        return "unknown"
    if any(version[:2] == v[:2] and version >= v for v in verified):
        return "supported"
    if version < verified[0]:
        return "older"
    if version > verified[-1]:
        return "newer"
    return "unverified"


def install_note(
    vendor: str, version: Version | None, how: str, skipped: frozenset[str] = frozenset()
) -> str:
    """The line ``hooks install`` prints: how the version was found and what it wires for it
    (less ``skipped``, moments its HTTP hooks never run at).

    >>> print(install_note("claude-code", (2, 1, 197), "--vendor-version 2.1.197"))  # doctest: +ELLIPSIS
    --vendor-version 2.1.197: wiring the moments of claude-code 2.1.197: SessionStart, ...
    >>> print(install_note("claude-code", (1, 0, 80), "claude --version: 1.0.80"))  # doctest: +ELLIPSIS
    claude --version: 1.0.80: older than the versions verified (2.1.197, 2.1.332); wiring ...
    """
    row = wiring(vendor, version)
    assert row is not None, vendor
    wired = ", ".join(m for m in row.moments if m not in skipped)
    if version is None:  # the newest row, named by the newest version the tests run of it
        newest = row.verified[-1] if row.verified else row.minimum
        return (
            f"{how}: wiring for {vendor} {shown(newest)}, the newest version verified "
            f"(pass --vendor-version X.Y.Z or --client PATH): {wired}"
        )
    support_ = support(vendor, version)
    if support_ == "supported":
        return f"{how}: wiring the moments of {vendor} {shown(version)}: {wired}"
    where = "not a version verified" if support_ == "unverified" else f"{support_} than the versions verified"
    return f"{how}: {where} ({shown_versions(vendor)}); wiring {wired}"
