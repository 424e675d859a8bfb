"""Bad command-line input: one line naming the option, exit 2, nothing run and nothing made.

A new user's trial found these answered with a Python error's name (a DSN that is not UTF-8,
``--timeout nan``, ``acp --steps abc``), the wrong cause (an empty path read as the current
folder), or not at all (``--cors-origin notanorigin``, ``acp --model ''``). The long demo run
ended with a bare ``ExceptionGroup`` past 10,000 generations.
"""

from __future__ import annotations

import pathlib

import pytest

from live_steering import LiveRuntime
from live_steering._cli import _demo_receipts, main
from live_steering._validate import origin_problem


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the CLI on ``argv``; it must exit 2; returns its stderr, which must be one line."""
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1, captured.err
    return captured.err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["receipts", "--dsn", "\udcff"], "--dsn: the DSN is not valid UTF-8"),
        (["receipts", ""], "PATH: an empty path names no file"),
        (["steer", "--dsn", " ", "s", "hi", "--id", "a"], "--dsn: an empty DSN names no server"),
        (["steer", "--store", "", "s", "hi", "--id", "a"], "--store: an empty path names no file"),
        (["demo", "--journal", ""], "--journal: an empty path names no file"),
        (["hooks", "install", "claude-code", "--write", ""], "--write: an empty path names no file"),
        (["hooks", "events", "--after", "99999999999999999999999"], "--after: must be an event sequence"),
        (["serve", "--store", "x.db", "--cors-origin", "notanorigin"], "'notanorigin' is not an origin"),
        (["serve", "--store", "x.db", "--cors-origin", ""], "--cors-origin: '' is not an origin"),
        (["acp", "--steps", "abc"], "--steps: must be >= 1, got 'abc'"),
        (["acp", "--step-delay", "soon"], "--step-delay: must be a finite number >= 0, got 'soon'"),
        (["receipts", "x.db", "--nope\udcff"], "unrecognized arguments: --nope\\udcff"),
    ],
)
def test_a_bad_argument_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, argv: list[str], said: str
) -> None:
    """Each is refused by the parser, before any store is opened or any file made."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        assert said in refused(capsys, *argv)
        assert list(tmp_path.iterdir()) == []


def test_a_timeout_that_is_not_a_finite_positive_number_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """``steer``/``stop --timeout nan`` (or inf, or 0): exit 2 with the option's rule, not a ValueError."""
    for command in (
        ["steer", "--store", str(tmp_path / "f.db"), "s", "hi", "--id", "a"],
        ["stop", "--store", str(tmp_path / "f.db"), "s"],
    ):
        for value in ("nan", "inf", "0"):
            assert main([*command, "--timeout", value]) == 2
            err = capsys.readouterr().err
            assert "--timeout must be a finite number of seconds above 0" in err
            assert "ValueError" not in err
    assert list(tmp_path.iterdir()) == []


def test_acp_refuses_an_empty_model_and_client_pacing_for_a_real_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``acp --model ''`` names no model; ``--client-paced`` paces only the scripted model."""
    base = ["acp", "--openai-base-url", "http://127.0.0.1:9/v1"]
    assert main([*base, "--model", ""]) == 2
    assert "--model needs a model name" in capsys.readouterr().err
    assert main([*base, "--model", "m", "--client-paced"]) == 2
    assert "--client-paced paces the scripted model" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("origin", "ok"),
    [
        ("https://app.example", True),
        ("http://127.0.0.1:8080", True),
        ("*", True),
        ("", False),
        ("notanorigin", False),
        ("https://app.example/path", False),
        ("chrome-extension://abcdefghijklmnop", True),
        ("vscode-webview://panel-id", True),
        ("tauri://localhost", True),
        ("app.example:443", False),
        ("https://user@app.example", False),
        ("https://app.example:port", False),
        (5, False),
    ],
)
def test_origin_rule(origin: object, ok: bool) -> None:
    """What ``create_app(cors_origins=...)`` and ``serve --cors-origin`` accept: a browser's origin."""
    assert (origin_problem(origin) is None) == ok


@pytest.mark.anyio
async def test_the_long_demo_run_outlasts_the_limit_of_chosen_generation_ids() -> None:
    """``demo --steers N`` runs runtime-issued generations, so no N meets ``generation_id_limit``
    (it ended with a bare ExceptionGroup past 10,000 generations of chosen ids)."""
    runtime = LiveRuntime(generation_id_limit=2)
    counts = await _demo_receipts.long_run(runtime, 30, lambda line: None)
    assert sum(counts.values()) == 30
    assert counts["applied"] + counts["held"] == 30
    await runtime.aclose()


def test_the_acp_agents_log_never_blocks_on_a_full_unread_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that pipes the agent's stderr and never reads it (the ACP Python SDK's
    spawn_agent_process): once the pipe is full a log line is dropped and counted, not a write
    that blocks the agent's event loop for good (it stopped answering after some 190 KB)."""
    import io
    import logging
    import os

    from live_steering._cli.acp import _NeverBlockingStderr

    read_end, write_end = os.pipe()
    stderr = io.TextIOWrapper(os.fdopen(write_end, "wb", buffering=0), write_through=True)
    monkeypatch.setattr("sys.stderr", stderr)
    try:
        handler = _NeverBlockingStderr()
        handler.setFormatter(logging.Formatter("live-steering acp: %(message)s"))
        record = logging.LogRecord("acp", logging.WARNING, __file__, 1, "x" * 1000, (), None)
        for _ in range(2000):  # 2 MB into a pipe of 64 KB nobody reads
            handler.emit(record)
        assert handler.dropped > 0
        os.read(read_end, 1 << 20)  # the client reads again: the next line says what was dropped
        handler.emit(record)
        said = os.read(read_end, 1 << 20)
        assert b"log line(s) dropped: stderr was full" in said
        assert handler.dropped == 0
    finally:
        stderr.close()
        os.close(read_end)
