"""Which moments a vendor's *installed version* accepts, and how to find that version.

``hooks install VENDOR`` wires only moments the installed CLI knows (a moment a version does
not know is at best ignored, at worst a settings warning on every start), in the timeout
unit that version reads. The facts live in one table per vendor, a row per version range,
each row naming where it was read (the installed CLI's own schema, source or ``--help``);
docs/hooks.md repeats the table. ``detect(vendor)`` runs the vendor's ``--version`` (bounded)
and parses it. A vendor without rows here (Claude Code, VS Code) keeps the plain adoption
map of ``_vendors.py``.

Standard library only; never imported by the hook command.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

__all__ = ["COMMANDS", "TABLES", "Version", "Wiring", "detect", "parse_version", "wiring"]

Version = tuple[int, int, int]

#: The command that reports each vendor's version (``VENDOR --version``); env overrides it.
COMMANDS = {"codex": "codex", "qwen-code": "qwen", "hermes": "hermes"}
#: ``LIVE_STEERING_CODEX``, ... : the CLI to ask instead of the one on PATH.
ENV_OVERRIDE = {
    "codex": "LIVE_STEERING_CODEX",
    "qwen-code": "LIVE_STEERING_QWEN",
    "hermes": "LIVE_STEERING_HERMES",
}
VERSION_TIMEOUT = 20.0


class Wiring:
    """One row of a vendor's table: what to wire for versions ``minimum`` and up (to the next row)."""

    __slots__ = ("minimum", "moments", "source", "timeout_ms", "timeouts", "trust_required", "verified")

    def __init__(
        self,
        minimum: Version,
        moments: tuple[str, ...],
        *,
        source: str,
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
        self.source = source
        """Where the row's facts were read."""
        self.timeouts = dict(timeouts or {})
        """Seconds per moment where it differs from the default (a vendor that clamps a moment)."""
        self.timeout_ms = timeout_ms
        """The vendor reads ``timeout`` as milliseconds (else seconds)."""
        self.trust_required = trust_required
        """The vendor runs no hook until the user has trusted it (Codex)."""

    def __repr__(self) -> str:
        return f"Wiring({'.'.join(map(str, self.minimum))}+)"


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

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> Version | None:
    """The first ``X.Y.Z`` in a ``--version`` output, or ``None``.

    >>> parse_version("codex-cli 0.171.0"), parse_version("Hermes Agent v0.19.0 (2026.11.3)")
    ((0, 171, 0), (0, 19, 0))
    """
    match = _VERSION.search(text)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


def command_for(vendor: str) -> str | None:
    """The vendor CLI to ask: ``$LIVE_STEERING_<VENDOR>`` if set, else the one on PATH, else ``None``."""
    override = os.environ.get(ENV_OVERRIDE.get(vendor, ""), "")
    if override:
        return override
    name = COMMANDS.get(vendor)
    return None if name is None else shutil.which(name)


def detect(vendor: str, command: str | None = None) -> tuple[Version | None, str]:
    """The installed version of ``vendor`` and a one-line account of how it was found.

    ``(None, why)`` when the CLI is not found or its ``--version`` says nothing parseable.
    Bounded (``VERSION_TIMEOUT``); never raises.
    """
    command = command or command_for(vendor)
    if command is None:
        return None, f"no {COMMANDS.get(vendor, vendor)} on PATH"
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
        return None, f"{command} --version failed: {exc}"
    version = parse_version(done.stdout + " " + done.stderr)
    if version is None:
        return None, f"{command} --version printed no version"
    return version, f"{command} --version: {'.'.join(map(str, version))}"


def wiring(vendor: str, version: Version | None) -> Wiring | None:
    """The table row for ``version`` (``None``: the newest row), or ``None`` for a vendor without a table."""
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
    return ", ".join(".".join(map(str, v)) for v in verified_versions(vendor))


def support(vendor: str, version: Version | None) -> str:
    """``supported`` (a verified version's minor series, from that version up), ``older`` (before
    the oldest verified), ``newer`` (past the newest verified series), ``unverified`` (between
    verified versions, in no verified series), or ``unknown``.

    >>> support("codex", (0, 171, 0)), support("codex", (0, 160, 2)), support("codex", (0, 180, 0))
    ('supported', 'older', 'newer')
    >>> support("qwen-code", (0, 21, 9)), support("qwen-code", (0, 22, 0)), support("qwen-code", (0, 24, 9))
    ('supported', 'unverified', 'supported')
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
