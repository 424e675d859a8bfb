"""Steering Claude Code through its hook replies with ``live_steering.hooks``.

Run it: ``python examples/hooks_example.py``. It plays a short session: a host
sends two instructions, a held permission loop and a hook whose reply already
says something pass them by, the next empty PostToolUse reply carries both,
and the session ends with a third still queued (dropped, audited). It prints
each hook reply and the event stream, and checks what it prints.
"""

from __future__ import annotations

import json

from live_steering.hooks import HookSession, SkipReason, Vendor

now = [0.0]  # a hand-driven clock, so queued_ms is reproducible
session = HookSession(
    Vendor.CLAUDE_CODE,
    "session-42",
    redact_text=True,  # text on the event stream reads "[redacted]"; the reply never is
    clock=lambda: 1_700_000_000.0 + now[0],
    monotonic=lambda: now[0],
)

# A host sends instructions (the relay's x.claude-code.control.instruct commands).
print(json.dumps(session.enqueue("cmd-1", "Use the corrected path").to_dict()))
print(json.dumps(session.enqueue("cmd-2", "Run the tests before committing").to_dict()))
now[0] = 0.8

# A permission request is a held loop: its reply is a decision, never steering.
held = session.on_hook("PermissionRequest", reply_would_be_empty=True)
assert held.reply is None
assert held.skipped is SkipReason.HELD_LOOP

# A PreToolUse whose handler denies the tool already has a reply: nothing rides on it.
busy = session.on_hook("PreToolUse", reply_would_be_empty=False)
assert busy.reply is None
assert busy.skipped is SkipReason.REPLY_NOT_EMPTY
now[0] = 1.5

# The next PostToolUse with nothing else to say carries both, joined in arrival order.
outcome = session.on_hook("PostToolUse", reply_would_be_empty=True)
assert outcome.delivered == ("cmd-1", "cmd-2")
print(json.dumps(outcome.reply))  # the hook handler writes exactly this to stdout

# A third instruction arrives, and the session ends before any eligible moment.
session.enqueue("cmd-3", "Summarise what changed")
now[0] = 2.0
ended = session.on_hook("SessionEnd", reply_would_be_empty=True)
assert ended.dropped == ("cmd-3",)

for event in session.recent_events():
    print(json.dumps(event, sort_keys=True))

receipt = session.receipt("cmd-1")
assert receipt is not None
assert receipt.disposition == "applied"
receipt = session.receipt("cmd-3")
assert receipt is not None
assert receipt.disposition == "held"
assert receipt.reason == "session-ended"
assert all(e.get("text", "[redacted]") == "[redacted]" for e in session.recent_events())
