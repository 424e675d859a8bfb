"""``live-steering demo``: the first thing a new user runs; its text and its ``--json`` event stream.

The CLI calls ``anyio.run`` itself, so these tests are synchronous and take the
backend as a parameter (``--backend asyncio|trio``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from live_steering._cli import demo as _demo
from live_steering._cli import main

BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])

PINNED_TYPES = {
    "generation.started",
    "generation.continued",
    "generation.finished",
    "generation.stopped",
    "generation.cancelled",
    "generation.failed",
    "steering.accepted",
    "steering.repeated",
    "steering.refused",
    "input.delivered",
    "steering.applied",
    "steering.held",
    "steering.unknown",
}

#: The final disposition of each input the demo steers, and why.
EXPECTED_FINAL = {
    "fix-path": ("applied", None),
    "burst-1": ("applied", None),
    "burst-2": ("applied", None),
    "burst-3": ("applied", None),
    "late-1": ("applied", None),
    "stop-1": ("held", "generation-stopped"),
    "cut-1": ("applied", None),
    "cut-2": ("unknown", "write-interrupted"),
    "cut-3": ("held", "generation-cancelled"),
}

_FINAL_OF = {
    "steering.applied": "applied",
    "steering.held": "held",
    "steering.unknown": "unknown",
}


def check_event_stream(events: list[dict[str, Any]]) -> None:
    """Assert the demo's stream is pinned (C21) and tells the expected story."""
    assert events, "no events"
    for event in events:
        assert event["type"] in PINNED_TYPES
        assert event["session_id"] == "demo"
        assert isinstance(event["time"], float)
    sequences = [e["sequence"] for e in events]
    assert sequences == sorted(set(sequences)), "sequence not strictly increasing"
    final: dict[str, tuple[str, str | None]] = {}
    for event in events:
        if event["type"] in _FINAL_OF:
            assert event["input_id"] not in final, f"{event['input_id']} changed after a final disposition"
            final[event["input_id"]] = (_FINAL_OF[event["type"]], event.get("reason"))
    assert final == EXPECTED_FINAL
    types = [e["type"] for e in events]
    assert types.count("generation.started") == 5
    assert [e["generation_id"] for e in events if e["type"] == "generation.continued"] == ["gen-3"]
    assert [e["input_id"] for e in events if e["type"] == "steering.repeated"] == ["fix-path"]
    refused = [(e["input_id"], e["reason"]) for e in events if e["type"] == "steering.refused"]
    assert refused == [("fix-path", "identity-conflict"), ("stale-1", "stale-generation")]


@BACKENDS
def test_demo_narrates_every_case(backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`live-steering demo` exits 0 and its timeline mentions each case of issue 2."""
    assert main(["demo", "--backend", backend]) == 0
    out = capsys.readouterr().out
    for phrase in (
        "lands at the next request boundary",
        "A burst of steers during a tool call",
        "late steer during the final checkpoint continues the same generation",
        "A stop holds the pending steer",
        "reported unknown",
        "A repeated id gets its current receipt",
        "refused before admission",
        "generation.continued",
        "(stale-generation)",
        "(identity-conflict)",
        "(write-interrupted)",
        "Summary: 9 accepted, 6 applied, 2 held, 1 unknown, 1 repeated, 2 refused; 5 generations",
    ):
        assert phrase in out, phrase


@BACKENDS
def test_demo_json_prints_only_pinned_events(backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`demo --json` prints one pinned event (C21) per line, nothing else, with the expected dispositions."""
    assert main(["demo", "--json", "--backend", backend]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    check_event_stream([json.loads(line) for line in lines])
    assert captured.err == ""


@BACKENDS
def test_demo_json_stdout_has_nothing_else_in_a_subprocess(backend: str) -> None:
    """As a real process, `demo --json` writes only JSON event lines to stdout and exits 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "live_steering._cli", "demo", "--json", "--backend", backend],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("\n")
    check_event_stream([json.loads(line) for line in proc.stdout.splitlines()])


def test_demo_json_into_a_closed_pipe_exits_quietly() -> None:
    """`demo --json | head -0`: a reader already gone makes no crash and no traceback (exit 0)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE, deterministically
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "live_steering._cli", "demo", "--json"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


def test_demo_exits_1_when_a_case_is_off(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo checks what it narrates: a case whose outcome is off makes it exit 1 with a message."""

    async def broken_case(runtime: Any, say: Any) -> None:
        _demo._expect(False, "the steer was not applied")

    monkeypatch.setattr(_demo, "_CASES", (broken_case,))
    assert main(["demo"]) == 1
    assert "demo: the steer was not applied" in capsys.readouterr().err


def test_cli_without_a_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """`live-steering` with no subcommand prints usage listing `demo` to stderr and exits 2."""
    assert main([]) == 2
    assert "demo" in capsys.readouterr().err
