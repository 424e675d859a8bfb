"""Steering Claude Code through the hook relay, as three separate processes would.

Run it: ``python examples/hooks_relay.py``. It uses a throwaway store and the
installed ``live-steering`` command, exactly as docs/hooks.md shows: a host sends
an instruction with ``live-steering instruct``, Claude Code runs ``live-steering
hook claude-code`` at its next PostToolUse moment (the hook JSON on stdin), and the
reply on stdout carries the instruction. Then it prints the audit stream and checks
what it printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

script = Path(sys.executable).parent / "live-steering"
COMMAND = [str(script)] if script.exists() else [sys.executable, "-m", "live_steering._cli"]

with tempfile.TemporaryDirectory() as tmp:
    env = {**os.environ, "LIVE_STEERING_STORE": os.path.join(tmp, "hooks.db")}

    def live_steering(*args: str, stdin: str = "") -> str:
        done = subprocess.run([*COMMAND, *args], input=stdin, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    # 1. A host (any process on the machine) sends an instruction to the session.
    session = "9a1f3c2e-5b7d-4e8a-9c61-2f0d8b4e7a13"
    print(live_steering("instruct", session, "Use the corrected path", "--id", "fix-1"), end="")

    # 2. Claude Code runs the hook command at its next PostToolUse, with this on stdin.
    hook_input = {
        "session_id": session,
        "transcript_path": f"/home/dev/.claude/projects/app/{session}.jsonl",
        "cwd": "/home/dev/app",
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q"},
        "tool_response": {"stdout": "1 failed, 12 passed"},
        "tool_use_id": "toolu_01ABCxyz",
    }
    reply = live_steering("hook", "claude-code", stdin=json.dumps(hook_input))
    print(reply, end="")  # what Claude Code reads: the instruction rides on this reply
    assert json.loads(reply) == {
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "Use the corrected path"}
    }

    # 3. The audit stream says what happened, cause-linked to the command id.
    events = [json.loads(line) for line in live_steering("hooks", "events", "--json").splitlines()]
    for event in events:
        print(event["sequence"], event["type"], event.get("cause"), event.get("text"))
    assert [e["type"] for e in events] == [
        "control.accepted",
        "x.claude-code.instruction.delivering",
        "x.claude-code.instruction.delivered",
    ]
    assert all(e["text"] == "[redacted]" for e in events)  # the stream never shows the text by default

    # 4. A retry of the same command answers its current state: applied, nothing queued twice.
    print(live_steering("instruct", session, "Use the corrected path", "--id", "fix-1"), end="")
