"""``live-steering demo``: the first thing a new user runs; its text and its ``--json`` event stream.

The CLI calls ``anyio.run`` itself, so these tests are synchronous and take the
backend as a parameter (``--backend asyncio|trio``).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import pty
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from live_steering._cli import _demo_receipts, main
from live_steering._cli import demo as _demo
from live_steering.journal import read_receipts
from process_helpers import stopped

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
    "tools.skipped",
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
    "only-a": ("applied", None),
    "then-1": ("applied", None),
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
    assert types.count("generation.started") == 7
    (skipped,) = [e for e in events if e["type"] == "tools.skipped"]
    assert (skipped["tool_call_ids"], skipped["input_ids"]) == (["b2", "b3"], ["only-a"])
    follow_up = [e for e in events if e.get("input_id") == "then-1" and e["type"] == "steering.applied"]
    assert [(e["target_generation_id"], e["delivery"]) for e in follow_up] == [("gen-auto-1", "follow_up")]
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
        "A steer skips the rest of a tool batch",
        "a follow-up runs as the next turn",
        "tools.skipped",
        "written as the next generation's request (a follow-up)",
        "Summary: 11 accepted, 8 applied, 2 held, 1 unknown, 1 repeated, 2 refused; 7 generations",
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


def _into_closed_pipe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``live-steering ARGS`` with its stdout a pipe whose reader is already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE, deterministically
    try:
        return subprocess.run(
            [sys.executable, "-m", "live_steering._cli", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )
    finally:
        os.close(write_end)


def test_demo_json_into_a_closed_pipe_exits_quietly() -> None:
    """`demo --json | head -0`: a reader already gone makes no crash and no traceback (exit 0)."""
    proc = _into_closed_pipe("demo", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("flags", "named"),
    [(["--json"], "--json"), (["--steers", "3"], "--steers"), (["--journal"], "--journal")],
)
def test_demo_fleet_refuses_options_it_cannot_honour(
    flags: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """demo --fleet with --json, --steers or --journal: a one-line usage error (exit 2), nothing run
    and no journal file created, rather than the option silently ignored."""
    if flags == ["--journal"]:
        flags = ["--journal", str(tmp_path / "demo.db")]
    assert main(["demo", "--fleet", *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("live-steering demo: --fleet takes no ")
    assert named in line
    assert list(tmp_path.iterdir()) == []


def test_demo_fleet_into_a_closed_pipe_exits_quietly() -> None:
    """`demo --fleet | head`: a reader gone ends the output quietly (exit 0, no traceback), and the
    run still ends its worker process and removes its temporary store."""
    folder = tempfile.mkdtemp(prefix="ls-")  # short: the nodes' Unix sockets live under it too
    try:
        proc = _into_closed_pipe("demo", "--fleet", env={**os.environ, "TMPDIR": folder})
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        assert not [name for name in os.listdir(folder) if name.startswith("live-steering-fleet-")]
        workers = [
            pid
            for pid in os.listdir("/proc")
            if pid.isdigit() and folder.encode() in _cmdline(pid) and b"_fleet_node" in _cmdline(pid)
        ]
        assert workers == []
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # ended meanwhile
        return b""


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


# -- errors, pipes and progress (every CLI error is one line on stderr) -----------------------


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@BACKENDS
def test_demo_journal_that_cannot_open_is_one_line(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--journal`` in a missing directory exits 1 with one line naming the path, printing nothing else;
    a file that is not a journal exits 2."""
    missing = tmp_path / "nonexistent" / "x.db"
    assert main(["demo", "--journal", str(missing), "--backend", backend]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert _one_line(err) == (
        f"live-steering demo: receipt journal {str(missing)!r}: cannot open its lock file "
        f"{str(missing) + '.lock'!r}: No such file or directory"
    )
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database" * 100)
    assert main(["demo", "--journal", str(garbage), "--json", "--backend", backend]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert _one_line(err).startswith(f"live-steering demo: receipt journal {str(garbage)!r}: ")


def test_demo_steers_that_is_not_a_number_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """``--steers abc`` is a usage error saying what is expected, never "invalid _positive value"."""
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--steers", "abc"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        "live-steering demo: error: argument --steers: must be a positive integer, got 'abc'"
        " (see live-steering demo --help)\n"
    )


@BACKENDS
def test_demo_long_run_into_head_exits_quietly(backend: str) -> None:
    """``demo --steers N | head -3``: the reader leaves after three lines; the run ends with exit 0 and
    no BrokenPipe traceback, in human mode."""
    with (
        subprocess.Popen(
            [sys.executable, "-m", "live_steering._cli", "demo", "--steers", "300", "--backend", backend],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as proc,
        stopped(proc),
    ):
        assert proc.stdout is not None
        assert proc.stderr is not None
        head = [proc.stdout.readline() for _ in range(3)]
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 0
    assert head[0].startswith(b"live_steering demo:")
    assert err == b""


@BACKENDS
def test_demo_journal_in_human_mode_narrates_durable_receipts(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Human mode with ``--journal`` prints no raw JSON: each durable disposition is a timeline line,
    and they agree with the file."""
    path = tmp_path / "demo.db"
    assert main(["demo", "--journal", str(path), "--backend", backend]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not [line for line in lines if line.lstrip().startswith("{")]
    durable = [line.split() for line in lines if " receipt.durable " in line]
    assert all(words[0] == "receipt.durable" for words in durable)
    assert all(words[3:] == ["(committed", "to", "the", "journal)"] for words in durable)
    final = {words[1]: words[2] for words in durable}
    assert final == {e.input_id: e.disposition.value for e in read_receipts(path)}
    assert final == {k: v for k, (v, _) in EXPECTED_FINAL.items()}


class _Terminal(io.StringIO):
    """A text stream that says it is a terminal: the check the progress line makes."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("steers", "drawn"), [(_demo.PROGRESS_FROM, True), (_demo.PROGRESS_FROM - 1, False)])
def test_demo_long_run_progress_goes_to_a_terminal_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], steers: int, drawn: bool
) -> None:
    """A long run of PROGRESS_FROM steers or more draws one updating progress line on a terminal
    stderr, and clears it at the end; a shorter run draws none; stdout is untouched."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["demo", "--json", "--steers", str(steers)]) == 0
    text = terminal.getvalue()
    first = capsys.readouterr().out.splitlines()[0]
    assert json.loads(first)["type"] == "generation.started"
    if not drawn:
        assert text == ""
        return
    assert "\n" not in text
    pattern = rf"\rlong run: steers: (\d+)/{steers} \(\d+%\)\x1b\[K"
    drawn_counts = [int(n) for n in re.findall(pattern, text)]
    assert drawn_counts == sorted(set(drawn_counts))  # redrawn only when the percentage moves
    assert drawn_counts[-1] == steers
    assert len(drawn_counts) <= 101
    assert text.endswith("\r\x1b[K")


def test_demo_progress_never_garbles_narration_on_a_shared_terminal() -> None:
    """With stdout and stderr on one terminal, each narration line starts on a cleared line."""
    terminal = _Terminal()
    anyio.run(functools.partial(_demo.run_demo, terminal, steers=_demo.PROGRESS_FROM, progress=terminal))
    text = terminal.getvalue()
    assert "\rlong run: steers:" in text
    for line in text.split("\n"):
        assert "long run: steers:" not in line.rsplit("\r", 1)[-1], repr(line)


def test_demo_progress_through_a_real_pty() -> None:
    """As a real process with stderr on a pseudo-terminal: the progress line reaches 100% and is cleared."""
    master, slave = pty.openpty()
    try:
        command = ["demo", "--json", "--steers", str(_demo.PROGRESS_FROM)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "live_steering._cli", *command], stdout=subprocess.DEVNULL, stderr=slave
        )
    finally:
        os.close(slave)
    chunks: list[bytes] = []
    with stopped(proc):  # killed by its pid if it hangs: the read below then ends (EIO)
        try:
            while chunk := os.read(master, 65536):
                chunks.append(chunk)
        except OSError:  # EIO: the process closed the terminal's last slave end
            pass
        finally:
            os.close(master)
        assert proc.wait(timeout=60) == 0
    text = b"".join(chunks).decode()
    assert f"\rlong run: steers: {_demo.PROGRESS_FROM}/{_demo.PROGRESS_FROM} (100%)\x1b[K" in text
    assert text.endswith("\r\x1b[K")


@BACKENDS
def test_demo_journal_failing_mid_run_is_one_line(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A journal whose file is unlinked under the run fails it: exit 1, one line on stderr (not the
    journal's log record too), and the event stream shows journal.failed."""
    real = _demo_receipts.journaled

    @contextlib.asynccontextmanager
    async def unlinked(runtime: Any, path: str, line: Any) -> AsyncIterator[Any]:
        async with real(runtime, path, line) as journal:
            os.unlink(path)
            yield journal

    monkeypatch.setattr(_demo, "journaled", unlinked)
    path = tmp_path / "gone.db"
    assert main(["demo", "--journal", str(path), "--json", "--backend", backend]) == 1
    out, err = capsys.readouterr()
    assert _one_line(err) == (
        f"live-steering demo: receipt journal {str(path)!r}: {str(path)!r} was unlinked or renamed "
        "while open; nothing written since is reported durable"
    )
    assert [json.loads(line)["type"] for line in out.splitlines()].count("journal.failed") == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["bogus"],
        ["receipts", "--disposition", "bogus"],
        ["demo", "--backend", "curio"],
        ["acp", "--steps", "0"],
    ],
)
def test_every_usage_error_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A usage error of any subcommand is one line on stderr naming --help, exit 2, nothing on stdout."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith("live-steering")
    assert "error: " in err
    assert err.endswith("--help)\n")


@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        (["receipts", "x.db", "--bogus"], "live-steering receipts"),
        (["hooks", "events", "--bogus"], "live-steering hooks"),
        (["--bogus"], "live-steering"),
    ],
)
def test_an_unknown_option_is_reported_by_the_subcommand_it_follows(
    argv: list[str], prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``receipts PATH --bogus`` points at ``live-steering receipts --help``, not the top command's."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"{prog}: error: unrecognized arguments: --bogus (see {prog} --help)\n"


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    """``live-steering --version`` prints the distribution's version on one line and exits 0."""
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"live-steering {version('live-steering')}\n"


def test_python_dash_m_runs_the_same_command() -> None:
    """``python -m live_steering`` is the ``live-steering`` command: same version line, same
    usage errors (exit 2), for an environment whose scripts are not on PATH."""
    from importlib.metadata import version

    done = subprocess.run(
        [sys.executable, "-m", "live_steering", "--version"], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (0, f"live-steering {version('live-steering')}\n")
    bad = subprocess.run(
        [sys.executable, "-m", "live_steering", "--bogus"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2
    assert "unrecognized arguments: --bogus" in bad.stderr
