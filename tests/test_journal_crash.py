"""kill -9 at every interesting point of a journaled run, then recover (C22, C23).

A writer subprocess (``live_steering.testing._journal_writer``) runs a short journaled loop
and SIGKILLs itself at an injected point (``LIVE_STEERING_KILL=POINT:N``), or the
test kills it after a random number of output lines. The children run once per
session, a few at a time; each test then recovers a copy of one crashed journal
on its backend and checks what C22/C23 promise about it.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

from journal_helpers import rows
from live_steering.journal import ReceiptJournal
from process_helpers import stopped

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@attrs.frozen
class Scenario:
    name: str
    kill: str | None = None
    """``POINT:N`` for the child to kill itself at."""
    after_lines: int | None = None
    """Kill the child from outside after this many lines of output."""
    backend: str = "asyncio"


def _scenarios() -> list[Scenario]:
    points = {
        "before-mark": range(1, 9),
        "after-mark": range(1, 9),
        "after-write": range(1, 20, 2),
        "in-commit": range(1, 13),
        "after-commit": range(1, 13),
    }
    out: list[Scenario] = []
    for point, occurrences in points.items():
        out.extend(Scenario(f"{point}-{n}", kill=f"{point}:{n}") for n in occurrences)
    rng = random.Random(20261130)
    out.extend(Scenario(f"random-{i}", after_lines=rng.randint(1, 70)) for i in range(12))
    backends = ("asyncio", "trio")
    return [attrs.evolve(s, backend=backends[i % 2]) for i, s in enumerate(out)]


SCENARIOS = _scenarios()


#: a child's directory and the JSON lines it printed
Output = tuple[Path, list[dict[str, str]]]


@attrs.frozen
class Crash:
    scenario: Scenario
    directory: Path
    killed: bool
    lines: list[dict[str, str]]


def _read_child(scenario: Scenario, fifo: Path, pid: int) -> list[dict[str, str]]:
    """Read a child's output to its end, killing it after ``after_lines`` lines if asked."""
    lines: list[dict[str, str]] = []
    with fifo.open() as stream:
        for line in stream:
            lines.append(json.loads(line))
            if scenario.after_lines is not None and len(lines) == scenario.after_lines:
                os.kill(pid, signal.SIGKILL)
    return lines


def _run_wave(server: subprocess.Popen[str], wave: list[Scenario], root: Path) -> dict[str, Output]:
    assert server.stdin is not None
    assert server.stdout is not None
    started: list[tuple[Scenario, Path, int]] = []
    for scenario in wave:
        directory = root / scenario.name
        directory.mkdir()
        fifo = directory / "out.fifo"
        os.mkfifo(fifo)
        request = {
            "id": scenario.name,
            "path": str(directory / "receipts.db"),
            "out": str(fifo),
            "kill": scenario.kill,
            "backend": scenario.backend,
        }
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        reply = json.loads(server.stdout.readline())
        assert reply["id"] == scenario.name
        started.append((scenario, fifo, reply["pid"]))
    with ThreadPoolExecutor(max_workers=len(started)) as pool:
        futures = [pool.submit(_read_child, *item) for item in started]
        _, stuck = concurrent.futures.wait(futures, timeout=60)
        for future, (scenario, fifo, _) in zip(futures, started, strict=True):
            if future in stuck:  # a child that never opened its FIFO: unblock the reader, then fail
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                pytest.fail(f"{scenario.name}: the writer never produced output")
        outputs = [future.result() for future in futures]
    return {s.name: (f.parent, out) for (s, f, _), out in zip(started, outputs, strict=True)}


@pytest.fixture(scope="session")
def crashes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Crash]:
    """Run every scenario once, through a fork server so each child skips interpreter start-up."""
    root = tmp_path_factory.mktemp("crashes")
    env = {k: v for k, v in os.environ.items() if k != "LIVE_STEERING_KILL"}
    command = [sys.executable, "-m", "live_steering.testing._journal_writer", "--serve"]
    outputs: dict[str, tuple[Path, list[dict[str, str]]]] = {}
    with (
        subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
        ) as server,
        stopped(server, bound=600),  # every wave's children, on a loaded machine: a bound, by its pid
    ):
        assert server.stdin is not None
        assert server.stdout is not None
        for start in range(0, len(SCENARIOS), 8):
            outputs.update(_run_wave(server, SCENARIOS[start : start + 8], root))
        server.stdin.close()
        exitcodes = {}
        for line in server.stdout:
            reply = json.loads(line)
            exitcodes[reply["id"]] = reply["exitcode"]
        assert server.wait(timeout=30) == 0
    crashes: dict[str, Crash] = {}
    for scenario in SCENARIOS:
        directory, lines = outputs[scenario.name]
        exitcode = exitcodes[scenario.name]
        killed = exitcode == -signal.SIGKILL
        if not killed:
            assert exitcode == 0, f"{scenario.name}: writer exited {exitcode}"
            assert lines[-1] == {"type": "done"}
        crashes[scenario.name] = Crash(scenario, directory, killed, lines)
    return crashes


def test_enough_kill_points_fired(crashes: dict[str, Crash]) -> None:
    """Every injected kill point fired, and at least 50 children died by SIGKILL."""
    injected = [c for c in crashes.values() if c.scenario.kill is not None]
    assert all(c.killed for c in injected), [c.scenario.name for c in injected if not c.killed]
    assert sum(c.killed for c in crashes.values()) >= 50


_RANK = {"queued": 0, "applied": 1, "held": 1, "unknown": 1}


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
async def test_recovery_after_kill(crashes: dict[str, Crash], name: str, tmp_path: Path) -> None:
    """Durable receipts survive with the same or a later disposition, none duplicated or left queued,
    nothing that may be in a context reported held, and integrity_check is ok."""
    crash = crashes[name]
    for file in crash.directory.iterdir():  # each backend recovers its own copy
        if file.name.startswith("receipts.db"):
            shutil.copy(file, tmp_path / file.name)
    path = tmp_path / "receipts.db"
    durable: dict[str, str] = {}
    for line in crash.lines:
        if line["type"] == "receipt.durable":
            previous = durable.get(line["input_id"])
            assert previous is None or _RANK[previous] <= _RANK[line["disposition"]]
            durable[line["input_id"]] = line["disposition"]
    in_context = {line["input_id"] for line in crash.lines if line["type"] == "context.write"}

    if not path.exists():  # killed before the journal file was created: nothing was promised
        assert durable == {}
        return
    async with ReceiptJournal(path) as journal:
        entries = {e.input_id: e for e in await journal.entries()}
        if not crash.killed:
            assert journal.recovery.held == journal.recovery.unknown == ()

    assert rows(path, "PRAGMA integrity_check") == [("ok",)]
    assert rows(path, "SELECT input_id, count(*) FROM receipts GROUP BY input_id HAVING count(*) > 1") == []
    for input_id, disposition in durable.items():
        assert input_id in entries, f"durable receipt of {input_id} lost"
        recovered = entries[input_id].disposition.value
        if disposition == "queued":
            assert _RANK[recovered] >= 0
        else:
            assert recovered == disposition, f"{input_id}: durable {disposition}, recovered {recovered}"
    for input_id, entry in entries.items():
        assert entry.disposition.value != "queued", f"{input_id} left queued"
        if input_id in in_context:
            assert entry.disposition.value != "held", f"{input_id} may be in a context but is held"
        if entry.disposition.value == "applied":
            assert input_id in in_context, f"{input_id} applied without a context write"
        if entry.reason == "runtime-lost" and entry.disposition.value == "held":
            assert not entry.marked


# -- the demo's long run, killed from outside ---------------------------------------------

DEMO_KILLS = [f"demo-{n}" for n in range(4)]


def _kill_demo(name: str, after: int, root: Path) -> Crash:
    """Run the demo's long run and SIGKILL it once it has printed ``after`` durable receipts."""
    directory = root / name
    directory.mkdir()
    command = [sys.executable, "-m", "live_steering._cli", "demo", "--json", "--steers", "200"]
    command += ["--journal", str(directory / "receipts.db")]
    lines: list[dict[str, str]] = []
    durable = 0
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as child, stopped(child):
        assert child.stdout is not None
        for line in child.stdout:  # read to the end: whatever it flushed before it died counts
            lines.append(json.loads(line))
            if lines[-1]["type"] == "receipt.durable":
                durable += 1
                if durable == after:
                    child.send_signal(signal.SIGKILL)
        killed = child.wait(timeout=30) == -signal.SIGKILL
    return Crash(Scenario(name, after_lines=after), directory, killed, lines)


@pytest.fixture(scope="session")
def demo_crashes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Crash]:
    """``live-steering demo --journal PATH --steers 200`` killed at four random points."""
    root = tmp_path_factory.mktemp("demo-crashes")
    rng = random.Random(7)
    plan = [(name, rng.randint(5, 300)) for name in DEMO_KILLS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        crashes = list(pool.map(lambda item: _kill_demo(item[0], item[1], root), plan))
    return {crash.scenario.name: crash for crash in crashes}


@pytest.mark.parametrize("name", DEMO_KILLS)
async def test_demo_recovery_after_kill(demo_crashes: dict[str, Crash], name: str, tmp_path: Path) -> None:
    """Every receipt the demo printed durable before kill -9 is in the recovered journal; none queued."""
    crash = demo_crashes[name]
    assert crash.killed, "the demo finished before it was killed: raise --steers"
    for file in crash.directory.iterdir():
        shutil.copy(file, tmp_path / file.name)
    path = tmp_path / "receipts.db"
    durable = {x["input_id"]: x["disposition"] for x in crash.lines if x["type"] == "receipt.durable"}
    delivered = {x["input_id"] for x in crash.lines if x["type"] == "input.delivered"}
    async with ReceiptJournal(path) as journal:
        entries = {e.input_id: e for e in await journal.entries()}
    assert rows(path, "PRAGMA integrity_check") == [("ok",)]
    assert all(e.disposition.value != "queued" for e in entries.values())
    for input_id, disposition in durable.items():
        assert input_id in entries
        if disposition != "queued":
            assert entries[input_id].disposition.value == disposition
    for input_id in delivered:  # written into the context before the kill: never held
        assert input_id not in entries or entries[input_id].disposition.value != "held"
