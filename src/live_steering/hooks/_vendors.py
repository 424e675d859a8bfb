"""What each vendor's hooks offer for steering, and the stateless decisions over it.

This module owns the facts of the adoption map (which moments carry context that
the runtime consumes, which are held loops, the cap and what it counts, the
session-end moment, the field names of the hook's stdin JSON, the reply shape)
and the decisions that need no state: is a moment eligible, how many queued
instructions fit one reply, is a text or command id admissible, what the reply
looks like. Both layers decide through these functions: the in-memory
``HookSession`` (``_session.py``) and the durable relay behind the
``live-steering hook`` command (``_store.py``), so the two never disagree. What a
text or id problem *means* beside the other facts of an ``enqueue`` (which refusal
wins) is not decided here but in ``_admit.py``, the one refusal order.

It imports the standard library only, and only modules the interpreter has
loaded anyway by the time ``json`` and ``sqlite3`` are: every hook moment of
every tool call of a vendor's agent starts a process that imports it. It must
never import attrs, anyio or the runtime. Every fact is cited in docs/hooks.md.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping

from .._validate import MAX_ID_CHARS as MAX_ID_CHARS
from .._validate import id_problem, utf8_encodable

SEPARATOR = "\n\n"
"""Pending instructions are joined with a blank line, in arrival order."""
DEFAULT_MAX_TEXT_CHARS = 16_000
"""Longest instruction admitted for an uncapped vendor, as C7 for steers."""

# The values of ``SkipReason`` (``_session.py``): why a moment carried nothing.
NOTHING_QUEUED = "nothing-queued"
HELD_LOOP = "held-loop"
REPLY_NOT_EMPTY = "reply-not-empty"
CONTEXT_NOT_CONSUMED = "context-not-consumed"
NO_CONTEXT_SURFACE = "no-context-surface"
SESSION_ENDED = "session-ended"

HOOK_SPECIFIC_OUTPUT = "hookSpecificOutput"
CONTEXT = "context"


class VendorFacts:
    """One vendor's hook facts, as plain data (immutable by convention; never mutated)."""

    __slots__ = (
        "agent_id_fields",
        "cap",
        "cap_counts_utf8",
        "cap_counts_utf16",
        "context_moments",
        "follow_up_moments",
        "follow_up_reply",
        "held_moments",
        "moment_fields",
        "name",
        "other_moments",
        "reopen_moments",
        "reply_shape",
        "session_end_moment",
        "session_id_fields",
        "title",
        "unconsumed_moments",
    )

    def __init__(
        self,
        name: str,
        title: str,
        *,
        context_moments: Iterable[str],
        held_moments: Iterable[str] = (),
        unconsumed_moments: Iterable[str] = (),
        other_moments: Iterable[str] = (),
        cap: int | None = None,
        cap_counts_utf16: bool = False,
        cap_counts_utf8: bool = False,
        session_end_moment: str | None = None,
        reopen_moments: Iterable[str] = (),
        reply_shape: str = HOOK_SPECIFIC_OUTPUT,
        session_id_fields: tuple[str, ...] = ("session_id",),
        moment_fields: tuple[str, ...] = ("hook_event_name",),
        follow_up_moments: Iterable[str] = (),
        follow_up_reply: str = "decision",
        agent_id_fields: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.title = title
        self.context_moments = frozenset(context_moments)
        self.held_moments = frozenset(held_moments)
        self.unconsumed_moments = frozenset(unconsumed_moments)
        self.other_moments = frozenset(other_moments)
        """Real moments of the vendor with no context surface: known, never eligible, never a failure."""
        self.cap = cap
        self.cap_counts_utf16 = cap_counts_utf16
        self.cap_counts_utf8 = cap_counts_utf8
        """The cap counts UTF-8 bytes (Codex cuts ``additionalContext`` at 10,000 bytes)."""
        self.session_end_moment = session_end_moment
        self.reopen_moments = frozenset(reopen_moments)
        self.reply_shape = reply_shape
        self.session_id_fields = session_id_fields
        self.moment_fields = moment_fields
        self.follow_up_moments = frozenset(follow_up_moments)
        """Moments whose documented reply keeps the agent from stopping ("do not stop yet"):
        a follow-up is delivered there, and only there; empty: the vendor refuses follow-ups.
        The main agent's steers ride the same decision there (``eligible_moments``)."""
        self.follow_up_reply = follow_up_reply
        """How a follow-up moment's reply keeps the agent going: ``"decision"``, the block
        decision ``{"decision": "block", "reason"}``; ``"context"``, the moment's own
        ``additionalContext`` (which that vendor also reads as "do not stop yet")."""
        self.agent_id_fields = agent_id_fields
        """The hook JSON fields naming the subagent a moment runs in (absent: the main agent)."""

    @property
    def known_moments(self) -> frozenset[str]:
        """Every moment this module knows for the vendor (eligible or not)."""
        end = {self.session_end_moment} if self.session_end_moment else set()
        return (
            self.context_moments
            | self.held_moments
            | self.unconsumed_moments
            | self.other_moments
            | self.follow_up_moments
            | end
        )

    def eligible_moments(self, agent_id: str | None) -> frozenset[str]:
        """The moments that carry instructions for ``agent_id`` (``None``: the main agent): the
        context moments, and for the main agent the follow-up moments (whose block decision
        carries steers too; Codex's Stop has no other way to carry one)."""
        return self.context_moments | (self.follow_up_moments if agent_id is None else frozenset())

    def __repr__(self) -> str:
        return f"VendorFacts({self.name!r})"


def utf16_length(text: str) -> int:
    """JavaScript's ``text.length``: UTF-16 code units (an emoji outside the BMP counts 2). O(n).

    >>> utf16_length("a"), utf16_length("\\U0001f600")
    (1, 2)
    """
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def measure(text: str, utf16: bool, utf8: bool = False) -> int:
    """The length the vendor's cap counts: UTF-16 code units, UTF-8 bytes, or characters.

    >>> measure("\u00e9", False, True), measure("\u00e9", False)
    (2, 1)
    """
    if utf8:
        return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return utf16_length(text) if utf16 else len(text)


def cap_unit(utf16: bool, utf8: bool = False) -> str:
    """What a cap counts, in words."""
    return "UTF-8 bytes" if utf8 else "UTF-16 code units" if utf16 else "characters"


def ineligibility(
    context_moments: frozenset[str],
    held_moments: frozenset[str],
    unconsumed_moments: frozenset[str],
    moment: str,
    reply_would_be_empty: bool,
) -> str | None:
    """Why ``moment`` cannot carry instructions (a skip-reason value), or ``None``. O(1).

    >>> facts = FACTS["claude-code"]
    >>> args = (facts.context_moments, facts.held_moments, facts.unconsumed_moments)
    >>> ineligibility(*args, "PostToolUse", True) is None
    True
    >>> ineligibility(*args, "PermissionRequest", True)
    'held-loop'
    """
    if moment in held_moments:
        return HELD_LOOP
    if moment in unconsumed_moments:
        return CONTEXT_NOT_CONSUMED
    if moment not in context_moments:
        return NO_CONTEXT_SURFACE
    if not reply_would_be_empty:
        return REPLY_NOT_EMPTY
    return None


def fit_count(lengths: Iterable[int], cap: int | None) -> int:
    """How many leading instructions (by measured length) fit one reply under ``cap``.

    Joined with ``SEPARATOR``; ``cap=None`` takes them all. Admission refuses any
    text over the cap, so a non-empty queue always yields at least one.

    >>> fit_count([6_000, 3_000, 2_000], 10_000)
    2
    """
    size = 0
    count = 0
    for length in lengths:
        grown = size + (len(SEPARATOR) if count else 0) + length
        if cap is not None and grown > cap:
            break
        size = grown
        count += 1
    return count


def build_reply(
    reply_shape: str,
    moment: str,
    context: str,
    *,
    keep_going: bool = False,
    follow_up_reply: str = "decision",
) -> dict[str, object]:
    """The vendor's JSON reply carrying ``context`` at ``moment`` (never redacted).

    ``keep_going``: a follow-up moment (the ``Stop`` of Claude Code, Codex, Qwen Code): the
    vendor's "do not stop yet" reply, the block decision whose ``reason`` the agent reads as
    its next instruction, or (``follow_up_reply="context"``, Claude Code) the moment's own
    ``additionalContext``, which keeps it going as well.

    >>> build_reply("hookSpecificOutput", "PostToolBatch", "Use the corrected path")
    {'hookSpecificOutput': {'hookEventName': 'PostToolBatch', 'additionalContext': 'Use the corrected path'}}
    >>> build_reply("hookSpecificOutput", "Stop", "Then update the changelog", keep_going=True)
    {'decision': 'block', 'reason': 'Then update the changelog'}
    >>> build_reply("context", "pre_llm_call", "Use the corrected path")
    {'context': 'Use the corrected path'}
    """
    if keep_going and follow_up_reply == "decision":
        return {"decision": "block", "reason": context}
    if reply_shape == CONTEXT:
        return {"context": context}
    return {"hookSpecificOutput": {"hookEventName": moment, "additionalContext": context}}


def command_id_problem(command_id: str) -> str | None:
    """Why a command id is refused ``invalid-input``, or ``None``: the runtime's id rules."""
    return id_problem(command_id, "command id")


def session_id_problem(session_id: str) -> str | None:
    """Why a session id is refused, or ``None``: the runtime's id rules, as ``HookSession``'s."""
    return id_problem(session_id, "session id")


def agent_id_problem(agent_id: str) -> str | None:
    """Why a subagent id is refused, or ``None``: the runtime's id rules."""
    return id_problem(agent_id, "agent id")


def follow_up_problem(vendors: Iterable[VendorFacts]) -> str | None:
    """Why a follow-up cannot be carried for a session these vendors may run, or ``None``.

    Only a vendor whose hooks have a "do not stop yet" reply (``follow_up_moments``) can
    deliver one; with no vendor known for the session, nothing says it ever will.
    """
    known = list(vendors)
    if not known:
        return "no vendor is known for this session yet: name it (--vendor) to send a follow-up"
    for facts in known:
        if not facts.follow_up_moments:
            return f"{facts.title} has no 'do not stop yet' hook reply to carry a follow-up"
    return None


def text_problem(
    text: str,
    *,
    max_chars: int,
    cap: int | None,
    cap_counts_utf16: bool,
    title: str,
    cap_counts_utf8: bool = False,
) -> str | None:
    """Why an instruction text is refused ``invalid-input``, or ``None``.

    ``cap`` bounds what the vendor counts (UTF-16 code units for Claude Code, UTF-8 bytes
    for Codex), so one
    instruction always fits one reply; an over-cap text is named by the vendor's cap,
    whatever its characters. ``max_chars`` bounds characters for an uncapped vendor.

    >>> text_problem("x" * 12_000, max_chars=16_000, cap=10_000, cap_counts_utf16=True, title="Claude Code")
    "text is over Claude Code's cap of 10,000 UTF-16 code units (it counts 12,000)"
    """
    if cap is not None and (size := measure(text, cap_counts_utf16, cap_counts_utf8)) > cap:
        unit = cap_unit(cap_counts_utf16, cap_counts_utf8)
        return f"text is over {title}'s cap of {cap:,} {unit} (it counts {size:,})"
    if len(text) > max_chars:
        return f"text is over {max_chars:,} characters"
    if not text or text.isspace():
        return "text is blank"
    if "\x00" in text:
        return "NUL character"
    if not utf8_encodable(text):
        return "not encodable as UTF-8"
    return None


def admission_problem(text: str, vendors: Iterable[VendorFacts]) -> str | None:
    """Why ``text`` is refused for a session that any of ``vendors`` may carry: the strictest wins.

    The relay checks against every vendor it knows for the session (the one ``instruct``
    names and the one its hooks ran as), so no vendor of the session is handed a text
    it can never carry.
    """
    for facts in vendors:
        problem = text_problem(
            text,
            max_chars=DEFAULT_MAX_TEXT_CHARS,
            cap=facts.cap,
            cap_counts_utf16=facts.cap_counts_utf16,
            title=facts.title,
            cap_counts_utf8=facts.cap_counts_utf8,
        )
        if problem is not None:
            return problem
    return None


def over_cap(text: str, facts: VendorFacts) -> bool:
    """True when ``text`` alone can never fit one reply of this vendor."""
    return facts.cap is not None and measure(text, facts.cap_counts_utf16, facts.cap_counts_utf8) > facts.cap


# -- the adoption map, verified (docs/hooks.md cites each source) --------------------------

_CLAUDE_CODE = VendorFacts(
    "claude-code",
    "Claude Code",
    # The hook-specific outputs that declare additionalContext in claude-agent-sdk's
    # types.py (0.2.189), less SubagentStop (its context goes to the stopping subagent).
    context_moments=(
        "SessionStart",
        "UserPromptSubmit",
        "UserPromptExpansion",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "PostToolBatch",
        "SubagentStart",
        "Notification",
        "Stop",
        "PostModelSwitch",
    ),
    held_moments=("PermissionRequest", "Elicitation", "ElicitationResult"),
    # The rest of the hooks reference's event list (code.claude.com/docs/en/hooks): real
    # moments whose output carries no additionalContext for this session's model.
    other_moments=(
        "Setup",
        "InstructionsLoaded",
        "PermissionDenied",
        "SubagentStop",
        "TaskCreated",
        "TaskCompleted",
        "StopFailure",
        "TeammateIdle",
        "PreCompact",
        "PostCompact",
        "ConfigChange",
        "CwdChanged",
        "FileChanged",
        "WorktreeCreate",
        "WorktreeRemove",
        # Read from the CLIs' own hook-event lists (docs/hooks.md, "Claude Code versions"):
        # MessageDisplay since 2.1.197 or earlier; the rest new in 2.1.332.
        "MessageDisplay",
        "PreModelSwitch",
        "DirectoryAdded",
        "PreSkillShellCommand",
    ),
    cap=10_000,
    cap_counts_utf16=True,
    session_end_moment="SessionEnd",
    # A Stop reply keeps Claude working: the block decision ``{"decision": "block", "reason"}``
    # (hooks reference, "Stop decision control"), or Stop's ``additionalContext`` (declared in
    # claude-agent-sdk's types.py). Seen with the real CLIs: 2.1.197 and 2.1.332 each make one
    # more request with the context once ("Stop hook additional context: ..."), where 2.1.332
    # puts a block decision's reason in that request twice (as "Stop hook feedback" and as a
    # "Stop hook blocking error"). So the context it is.
    follow_up_moments=("Stop",),
    follow_up_reply="context",
    # Hooks that run inside a subagent carry its ``agent_id`` (and ``agent_type``).
    agent_id_fields=("agent_id",),
    # ``claude --resume`` reuses the session id: a later start or prompt opens a new epoch.
    reopen_moments=("SessionStart", "UserPromptSubmit"),
)

_CODEX = VendorFacts(
    "codex",
    "Codex",
    # The hook outputs that carry ``hookSpecificOutput.additionalContext`` in the JSON schemas
    # Codex 0.171.0 embeds (``*.command.output``), each seen reaching the next model request with
    # the real CLI (tests/test_hooks_codex_real.py). Not SubagentStart: its context goes to the
    # subagent it starts, never to the main agent an instruction is for. Not Stop: it carries
    # instructions only as its block decision (``follow_up_moments``, below); a Stop reply with
    # additionalContext is refused as invalid output.
    context_moments=("SessionStart", "PreToolUse", "PostToolUse", "UserPromptSubmit"),
    held_moments=("PermissionRequest",),
    # The rest of the event names 0.171.0 fires (``HookEventName`` of its app-server protocol).
    other_moments=(
        "PreCompact",
        "PostCompact",
        "SubagentStart",
        "SubagentStop",
        "PreModelRequest",
        "PostModelRequest",
        "Interrupt",
    ),
    # ``codex exec`` and the TUI both fire SessionEnd (reason ``other``, ``clear``, ...) once a
    # thread closes; a resumed thread fires SessionStart again with ``source: "resume"``.
    session_end_moment="SessionEnd",
    reopen_moments=("SessionStart", "UserPromptSubmit"),
    # 0.171.0's ``stop.command.output`` schema: ``decision: "block"`` with a ``reason``. Seen with
    # the real CLI: Codex runs one more model turn with the reason as a user message, then fires
    # Stop again (``stop_hook_active: true``); with no reply that one ends the run.
    follow_up_moments=("Stop",),
    # Codex 0.171.0 cuts a hook's additionalContext over 10,000 UTF-8 bytes to a head and a tail
    # ("...N tokens truncated..."): 10,000 bytes arrive whole, 10,001 do not, with the real CLI
    # (tests/test_hooks_codex_real.py). A hook entry may raise it (``additionalContextLimit``);
    # ours do not, so one reply carries at most 10,000 bytes.
    cap=10_000,
    cap_counts_utf8=True,
    # A subagent's hooks (``multi_agent`` spawn_agent) carry the parent's ``session_id`` and the
    # subagent's own ``agent_id`` (and ``agent_type``), seen with the real 0.171.0 CLI.
    agent_id_fields=("agent_id",),
)

_QWEN_CODE = VendorFacts(
    "qwen-code",
    "Qwen Code",
    # Qwen Code 0.24.4 (``HookEventName`` in its bundled core, 22 moments). These four put the
    # hook's additionalContext into the next model request (seen with the real CLI, and in its
    # source: SessionStart's ``hook_context``, UserPromptSubmit's wrapped prompt part, the
    # functionResponse parts of PostToolUse / PostToolBatch, PostToolUseFailure's error text).
    context_moments=(
        "SessionStart",
        "UserPromptSubmit",
        "PostToolUse",
        "PostToolUseFailure",
        "PostToolBatch",
    ),
    held_moments=("PermissionRequest",),
    # Read and thrown away: PreToolUse's additionalContext only reaches a debug log and Stop's
    # output has no context surface (neither reached the model with the real CLI); Notification's
    # goes to the notification, not the model. Stop carries instructions only as its block
    # decision (``follow_up_moments``, below).
    unconsumed_moments=("PreToolUse", "Stop", "Notification"),
    other_moments=(
        "UserPromptExpansion",
        "MessageDisplay",
        "SubagentStart",  # its context goes to the subagent it starts
        "SubagentStop",
        "PreCompact",
        "PostCompact",
        "SessionDelete",
        "PermissionDenied",
        "StopFailure",
        "TodoCreated",
        "TodoCompleted",
        "InstructionsLoaded",
    ),
    # Interactive sessions fire SessionEnd; ``qwen -p`` fires none (docs/hooks.md says what ends one).
    session_end_moment="SessionEnd",
    reopen_moments=("SessionStart", "UserPromptSubmit"),
    # Seen with the real 0.24.4 CLI (``qwen -p``): a Stop reply ``{"decision": "block", "reason"}``
    # makes it run one more model turn with the reason, then fire Stop again
    # (``stop_hook_active: true``); with no reply that one ends the run.
    follow_up_moments=("Stop",),
    # A subagent's hooks (the ``agent`` tool) carry the parent's ``session_id`` and, from 0.23.4
    # on, the subagent's ``agent_id``, seen with the real CLIs. 0.21.2 sends no ``agent_id``: its
    # subagents' hooks cannot be told from the main agent's (docs/hooks.md).
    agent_id_fields=("agent_id",),
)

_VSCODE = VendorFacts(
    "vscode",
    "VS Code agent",
    context_moments=("SessionStart", "UserPromptSubmit", "SubagentStart", "PreToolUse", "PostToolUse"),
    # The other three of the eight lifecycle events of the VS Code hooks page.
    other_moments=("PreCompact", "SubagentStop", "Stop"),
    # The VS Code hook reference names the common fields in camelCase; the snake_case
    # spelling of Claude-format configs is accepted as a fallback.
    session_id_fields=("sessionId", "session_id"),
    moment_fields=("hookEventName", "hook_event_name"),
)

_HERMES = VendorFacts(
    "hermes",
    "Hermes",
    context_moments=("pre_llm_call",),
    held_moments=("pre_tool_call",),
    # ``on_session_start`` is wired (it reopens a resumed session before its first turn) but its
    # return value is ignored by Hermes, so it never carries an instruction.
    unconsumed_moments=("on_session_start", "post_tool_call", "post_llm_call", "on_session_end"),
    # The rest of ``VALID_HOOKS`` in hermes_cli/plugins.py (0.19.0): no context read back.
    other_moments=(
        "pre_api_request",
        "post_api_request",
        "api_request_error",
        "on_session_reset",
        "subagent_start",
        "subagent_stop",
        "transform_terminal_output",
        "transform_tool_result",
        "transform_llm_output",
        "pre_verify",
        "pre_gateway_dispatch",
        "pre_approval_request",
        "post_approval_response",
        "kanban_task_claimed",
        "kanban_task_completed",
        "kanban_task_blocked",
    ),
    # ``tools/hook_output_spill.py``: plugin context over ``hooks.output_spill.max_chars``
    # (default 10,000, Python characters) is replaced by a head/tail preview.
    cap=10_000,
    session_end_moment="on_session_finalize",
    reopen_moments=("on_session_start", "pre_llm_call"),
    reply_shape=CONTEXT,
)

#: Every vendor of the adoption map, keyed by its name (``claude-code``, ...). Read-only.
FACTS: Mapping[str, VendorFacts] = types.MappingProxyType(
    {f.name: f for f in (_CLAUDE_CODE, _CODEX, _QWEN_CODE, _VSCODE, _HERMES)}
)
#: The strictest cap of any vendor: a host that names no vendor gets text every vendor can carry.
#: Codex's 10,000 UTF-8 bytes: never fewer than Claude Code's UTF-16 code units or Hermes's characters.
STRICTEST = _CODEX
