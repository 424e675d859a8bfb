"""The benchmark machinery: the JSON it prints and the rules of its fields, never its timings.

The suite runs in its ``TINY`` mode here (two rounds, small counts): its numbers
mean nothing, only their shape and the arithmetic between fields are checked.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from typing import Any

import benchmarks
import pytest
from benchmarks import BACKENDS, TINY, figure
from benchmarks.__main__ import main
from benchmarks._busy import busy_machine, hog_count
from benchmarks._calls import boundary_calls
from benchmarks._margin import apply_margin, room

#: Every figure of issue 6 with its unit and target.
EXPECTED: dict[str, tuple[str, float]] = {
    "submit_queued": ("ns", 2.0),
    "submit_repeat": ("ns", 1.0),
    "submit_repeat_nowait": ("ns", 0.5),
    "identity_scale": ("ns", 1.3),
    "wake_latency": ("ns", 1.5),
    "wake_vs_inbox": ("ns", 0.8),
    "boundary_per_input": ("ns", 1.0),
    "boundary_linearity": ("ns", 1.2),
    "boundary_single": ("ns", 1.35),  # issue 25
    "boundary_single_one_at_a_time": ("ns", 1.5),  # issue 22: a delivery mode (C30)
    "runtimes_scale": ("ns", 1.3),
    "runtime_memory": ("bytes", 8_192),
    "identity_memory": ("bytes", 1_024),
    "event_overhead": ("ns", 1.5),
    # the acp group (issue 13): asyncio only, the ACP SDK is asyncio-only
    "acp_steer_roundtrip": ("ns", 1.5),
}
#: Figures measured once per run, not per backend (they start processes), with their backend field.
PROCESS_FIGURES: dict[str, tuple[str, float]] = {"hook_command": ("ns", 1.3), "instruct_command": ("ns", 1.5)}
PROCESS = "process"
ASYNCIO_ONLY = {"acp_steer_roundtrip"}
#: The integration figures of issue 14: asyncio only (the frameworks are asyncio-only).
INTEGRATION_FIGURES: dict[str, tuple[str, float]] = {
    "integration_overhead_amplifier": ("ns", 1.05),  # issue 21
    "integration_overhead_pydantic_ai": ("ns", 1.05),
    "integration_overhead_openai_agents": ("ns", 1.05),
    "integration_overhead_langgraph": ("ns", 1.05),
}
FIELDS = {"name", "backend", "unit", "value", "floor", "ratio", "target", "ok"}
#: Figures that report their batches' first ten boundaries beside them (``first_ten``, ns).
FIRST_TEN = {"boundary_single", "boundary_single_one_at_a_time"}


def check_figure(fig: dict[str, Any]) -> None:
    """A figure obeys its rules; one printed by ``main`` also carries its ``room`` (``--margin``)."""
    if fig["name"] in FIRST_TEN:
        assert fig["first_ten"] > 0
        fig = {key: value for key, value in fig.items() if key != "first_ten"}
    assert set(fig) in (FIELDS, FIELDS | {"room"})
    if "room" in fig:
        expected = room(fig)
        assert expected is not None
        assert fig["room"] == round(expected, 3)
        fig = {key: value for key, value in fig.items() if key != "room"}
    unit, target = {**EXPECTED, **PROCESS_FIGURES, **INTEGRATION_FIGURES}[fig["name"]]
    assert fig["unit"] == unit
    assert fig["target"] == target
    assert fig["backend"] == PROCESS if fig["name"] in PROCESS_FIGURES else fig["backend"] in BACKENDS
    assert fig["value"] > 0
    assert fig["floor"] > 0
    if unit == "ns":
        assert math.isclose(fig["ratio"], fig["value"] / fig["floor"])
    else:
        assert fig["floor"] == sys.getsizeof({})
        assert fig["ratio"] == fig["value"]
    assert fig["ok"] is (fig["ratio"] <= fig["target"])


@pytest.fixture(scope="module")
def tiny_run() -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
    return benchmarks.run(TINY)


def test_every_figure_on_every_backend(
    tiny_run: tuple[list[dict[str, Any]], dict[str, dict[str, float]]],
) -> None:
    """Every core figure is reported once on asyncio and once on trio; the acp one and each
    integration figure on asyncio; hook_command once."""
    figures, _ = tiny_run
    assert sorted((f["name"], f["backend"]) for f in figures) == sorted(
        [
            (name, backend)
            for name in EXPECTED
            for backend in BACKENDS
            if name not in ASYNCIO_ONLY or backend == "asyncio"
        ]
        + [(name, "asyncio") for name in INTEGRATION_FIGURES]
        + [(name, PROCESS) for name in PROCESS_FIGURES]
    )


def test_fields_obey_the_ratio_and_ok_rules(
    tiny_run: tuple[list[dict[str, Any]], dict[str, dict[str, float]]],
) -> None:
    """ratio is value/floor for ns (value itself for bytes) and ok is ratio <= target."""
    figures, _ = tiny_run
    for fig in figures:
        check_figure(fig)


def test_floors_are_measured_on_each_backend(
    tiny_run: tuple[list[dict[str, Any]], dict[str, dict[str, float]]],
) -> None:
    """The four floors are measured, positive, on both backends."""
    _, floors = tiny_run
    assert set(floors) == set(BACKENDS)
    for values in floors.values():
        assert set(values) == {"checkpoint", "dict_admit", "event_wake", "inbox_baseline"}
        assert all(value > 0 for value in values.values())


def test_the_docs_figures_table_states_each_target_the_run_holds_it_to(
    tiny_run: tuple[list[dict[str, Any]], dict[str, dict[str, float]]],
) -> None:
    """docs/performance.md's table of figures says, for every figure of the default run, the
    target the run checks (its `hook_command` row once said 2.0 where the code held 1.3)."""
    figures, _ = tiny_run
    docs = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "performance.md")
    with open(docs, encoding="utf-8") as file:
        row = r"^\| `([a-z_]+)` \|.*\| <= ([0-9.,]+)(?: bytes)?(?: \(.*\))? \|$"
        rows = re.findall(row, file.read(), re.M)
    stated = {name: float(value.replace(",", "")) for name, value in rows}
    for fig in figures:
        assert fig["name"] in stated, f"{fig['name']} has no row in docs/performance.md's table"
        assert stated[fig["name"]] == fig["target"], fig["name"]


def test_figure_rules_at_the_boundary() -> None:
    """A ratio exactly at its target is ok, just above it is not; bytes keep their value as ratio."""
    at = figure("x", "asyncio", "ns", 300.0, 150.0, 2.0)
    assert at["ratio"] == 2.0
    assert at["ok"] is True
    above = figure("x", "asyncio", "ns", 300.2, 150.0, 2.0)
    assert above["ok"] is False
    memory = figure("m", "trio", "bytes", 9_000.0, 64.0, 8_192)
    assert (memory["ratio"], memory["ok"]) == (9_000.0, False)


def test_json_is_one_object_and_the_exit_code_follows_ok(capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints exactly one {"figures": [...]} object; the exit code is 0 iff every figure is ok."""
    argv = ["--tiny", "--json", "--backend", "asyncio", "--group", "core", "--group", "acp"]
    code = main([*argv, "--group", "integrations"])
    out = capsys.readouterr().out
    document = json.loads(out)
    assert list(document) == ["figures", "busy"]
    assert document["busy"] == 0
    figures = document["figures"]
    assert {f["backend"] for f in figures} == {"asyncio"}
    assert {f["name"] for f in figures} == set(EXPECTED) | set(INTEGRATION_FIGURES)
    for fig in figures:
        check_figure(fig)
    assert code == (0 if all(f["ok"] for f in figures) else 1)


def test_the_table_shows_a_boundary_figures_first_ten(capsys: pytest.CaptureFixture[str]) -> None:
    """The printed table carries a boundary figure's ``first_ten`` and its ratio to the same floor;
    no other row has a note."""
    main(["--tiny", "--group", "core", "--backend", "asyncio"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.split()[1:2] == ["asyncio"]]
    noted = {line.split()[0]: line for line in rows if "first ten" in line}
    assert set(noted) == FIRST_TEN
    for line in noted.values():
        match = re.search(r"first ten ([\d,.]+) ns \(([\d.]+)\)$", line)
        assert match is not None, line
        floor = float(line.split()[3].replace(",", ""))
        assert float(match[2]) == pytest.approx(float(match[1].replace(",", "")) / floor, abs=0.001)


def test_groups_select_what_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """--group acp runs only acp_steer_roundtrip, --group integrations only the integration figures;
    --group core on trio runs no ACP figure."""
    main(["--tiny", "--json", "--group", "acp"])
    assert [f["name"] for f in json.loads(capsys.readouterr().out)["figures"]] == ["acp_steer_roundtrip"]
    main(["--tiny", "--json", "--group", "integrations"])
    names = {f["name"] for f in json.loads(capsys.readouterr().out)["figures"]}
    assert names == set(INTEGRATION_FIGURES)
    main(["--tiny", "--json", "--group", "core", "--group", "acp", "--backend", "trio"])
    names = {f["name"] for f in json.loads(capsys.readouterr().out)["figures"]}
    assert names == set(EXPECTED) - ASYNCIO_ONLY


def test_busy_runs_beside_hogs_and_stops_them(capsys: pytest.CaptureFixture[str]) -> None:
    """--busy measures beside one CPU hog per other core, says so, and leaves no hog behind."""
    main(["--tiny", "--json", "--busy", "--backend", "asyncio", "--group", "core"])
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["busy"] == hog_count()
    assert document["figures"]
    for fig in document["figures"]:
        check_figure(fig)
    (line,) = [line for line in captured.err.splitlines() if "CPU hog" in line]
    pids = [int(pid) for pid in re.findall(r"\d+", line.split("pids", 1)[1])]
    assert len(pids) == hog_count()
    for pid in pids:  # each was killed and reaped: no such process any more
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_busy_machine_stops_its_hogs_when_the_run_fails() -> None:
    started: list[int] = []

    def crashing_run() -> None:
        with busy_machine(2) as pids:
            started.extend(pids)
            raise RuntimeError("a figure crashed")

    with pytest.raises(RuntimeError, match="crashed"):
        crashing_run()
    assert len(started) == 2
    for pid in started:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


#: Python frames one warm one-input boundary may make, the writer's included (docs/performance.md,
#: "Where a one-input boundary goes"): a count, the same on a busy machine, so a change that adds a
#: call to the hot path shows here even when the timings cannot tell.
BOUNDARY_FRAMES = {"asyncio": 9, "trio": 9}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_one_input_boundary_makes_no_more_calls_than_its_budget(backend: str) -> None:
    calls = boundary_calls(backend)
    frames = {call: n for call, n in calls.items() if call[0] != "C"}
    assert sum(frames.values()) <= BOUNDARY_FRAMES[backend], frames
    core = {name: n for (where, name), n in frames.items() if where == "_core.py"}
    # one core call to begin the boundary and take the input, one to confirm it and, the queue
    # drained, end the boundary: no ``next_write`` answering None, no ``end_boundary``
    assert core == {"SteeringCore.start_boundary": 1, "SteeringCore.confirm_write": 1}
    assert frames[("_events.py", "EventHub.publish")] == 2  # input.delivered, steering.applied


def test_help_documents_the_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    """--help says that a figure that is not ok makes the exit status non-zero."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "1 when any figure is not ok" in " ".join(capsys.readouterr().out.split())


def test_room_is_measured_against_what_the_target_allows() -> None:
    """Room under a target: (target - ratio) / target; for an overhead figure the overhead's room,
    (target - ratio) / (target - 1); for a figure bounded from below (measured - target) / target;
    none without a target. Negative when the figure misses."""
    assert room(figure("boundary_single", "asyncio", "ns", 135.0, 100.0, 1.5)) == pytest.approx(0.1)
    assert room(figure("boundary_single", "asyncio", "ns", 160.0, 100.0, 1.5)) == pytest.approx(-1 / 15)
    overhead = figure("integration_overhead_amplifier", "asyncio", "ns", 1045.0, 1000.0, 1.05)
    assert room(overhead) == pytest.approx(0.1)  # 10% of the 5% allowed, not 10% of 1.05
    assert room(figure("runtime_memory", "trio", "bytes", 4096.0, 64.0, 8192)) == pytest.approx(0.5)
    throughput = {"name": "throughput", "value": 330.0, "ratio": None, "target": 300}
    assert room(throughput) == pytest.approx(0.1)
    assert room({"name": "http_events_fanout", "value": 0.01, "ratio": None, "target": None}) is None


def test_margin_fails_a_figure_with_less_room_and_only_those() -> None:
    """apply_margin adds the printed (rounded) room; with a margin, a figure with less room is not ok,
    one with as much is, and a figure that already missed its target stays not ok."""
    tight = figure("wake_latency", "trio", "ns", 140.0, 100.0, 1.5)  # 6.7% room
    roomy = figure("wake_latency", "asyncio", "ns", 135.0, 100.0, 1.5)  # 10% room, exactly
    missed = figure("boundary_single", "trio", "ns", 160.0, 100.0, 1.5)
    reported = {"name": "http_events_fanout", "value": 0.01, "ratio": None, "target": None, "ok": True}
    figures = [tight, roomy, missed, reported]
    apply_margin(figures, 0.0)
    assert [f["ok"] for f in figures] == [True, True, False, True]
    assert [f["room"] for f in figures] == [0.067, 0.1, -0.067, None]
    apply_margin(figures, 0.10)
    assert [f["ok"] for f in figures] == [False, True, False, True]


def test_margin_option_sets_ok_and_the_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    """--margin 0.99 leaves no figure of a real run ok (none has 99% room): exit 1, every row 'NO';
    without it the JSON still carries each figure's room. A margin outside [0, 1) is a usage error."""
    argv = ["--tiny", "--json", "--backend", "trio", "--group", "core"]
    code = main([*argv, "--margin", "0.99"])
    figures = json.loads(capsys.readouterr().out)["figures"]
    assert code == 1
    assert figures
    assert not any(f["ok"] for f in figures)
    main(argv)
    for fig in json.loads(capsys.readouterr().out)["figures"]:
        check_figure(fig)
    for bad in ("1", "-0.1", "ten"):
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--margin", bad])
        assert exit_info.value.code == 2
    assert "--margin" in capsys.readouterr().err


# -- the fleet group (python -m benchmarks --fleet) --------------------------------------------

FLEET_FIGURES = {"remote_submit", "remote_submit_p99", "throughput", "decisions_per_commit", "takeover"}


def test_fleet_group_reports_every_figure_with_its_rule() -> None:
    """--fleet on SQLite, both backends in one run (as `--fleet` runs them: a floor that removed
    its socket folder after the first backend once failed the second): each figure once per
    backend, ratio = value/floor where there is one, ok by its target."""
    from benchmarks import bench_fleet

    rows = bench_fleet.run(BACKENDS, dsn=None, quick=False, tiny=True, postgres=False)
    assert sorted((r["name"], r["backend"]) for r in rows) == sorted(
        (name, backend) for name in FLEET_FIGURES for backend in BACKENDS
    )
    for row in rows:
        assert row["store"] == "sqlite"
        assert row["value"] > 0
        if row["floor"] is not None:
            assert math.isclose(row["ratio"], row["value"] / row["floor"], rel_tol=1e-2)
        higher = row["name"] in {"throughput", "decisions_per_commit"}
        measured = row["value"] if row["ratio"] is None else row["ratio"]
        assert row["ok"] is (measured >= row["target"] if higher else measured <= row["target"])
    assert "remote_submit" in bench_fleet.table(rows)


# -- the HTTP group: hook_http (python -m benchmarks --http) -------------------------------------


def test_http_group_reports_hook_http_well_formed(capsys: pytest.CaptureFixture[str]) -> None:
    """--http --json carries hook_http: a delivered HTTP hook over /ping, ok by ratio <= 2 and a
    median under 10 ms (the numbers of a tiny run mean nothing; only the shape is checked)."""
    main(["--http", "--tiny", "--json", "--backend", "asyncio"])
    rows = json.loads(capsys.readouterr().out)["http"]
    (hook,) = [r for r in rows if r["name"] == "hook_http"]
    assert (hook["backend"], hook["unit"], hook["target"], hook["limit"]) == ("asyncio", "s", 2.0, 0.01)
    assert hook["value"] > 0
    assert hook["floor"] > 0
    assert hook["ratio"] == round(hook["value"] / hook["floor"], 3)
    assert hook["ok"] is (hook["ratio"] <= 2.0 and hook["value"] <= 0.01)
    assert hook["room"] == round((2.0 - hook["ratio"]) / 2.0, 3)
    assert hook["synced_commit"] > 0  # the disk's part, reported beside the ratio


@pytest.mark.parametrize(
    ("argv", "needed"),
    [
        (["--tiny", "--group", "acp"], "acp"),
        (["--tiny", "--group", "core"], "trio"),
        (["--http", "--tiny", "--backend", "asyncio"], "httpx"),
        (["--http", "--tiny", "--backend", "asyncio"], "uvicorn"),
        (["--http", "--tiny", "--backend", "trio"], "hypercorn"),
        (["--fleet", "--tiny", "--dsn", "postgresql://nobody@127.0.0.1/none"], "psycopg"),
        (["--calls"], "trio"),
    ],
)
def test_a_run_missing_a_dev_dependency_says_so_in_one_line(
    argv: list[str], needed: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the 'dev' extra a run names what it lacks and how to install it, exit 2, and measures
    nothing (no traceback from deep inside a group)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == needed else real(name, *a)
    )
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    install = ".venv/bin/pip install -e '.[dev]'"
    assert line == f"benchmarks: this run needs {needed}, which the 'dev' extra installs: {install}"


@pytest.mark.parametrize(
    ("argv", "absent", "postgres"),
    [
        (["--fleet", "--backend", "asyncio"], ("acp", "trio", "psycopg", "httpx"), False),
        (["--group", "hook"], ("trio", "acp", "httpx"), True),
        (["--group", "integrations"], ("trio", "acp"), True),
        (["--group", "acp"], ("trio",), True),
        (["--http", "--backend", "trio"], ("uvicorn", "acp", "psycopg"), True),
        (["--backend", "asyncio"], ("trio", "httpx", "psycopg"), True),
        (["--calls", "--backend", "asyncio"], ("trio", "acp"), True),
    ],
)
def test_a_run_is_not_refused_for_what_it_never_imports(
    argv: list[str], absent: tuple[str, ...], postgres: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check asks only for what the chosen run imports: the fleet group on SQLite alone needs
    no PostgreSQL driver, the hook, integration and ACP groups no trio, hypercorn no uvicorn."""
    import importlib.util

    from benchmarks.__main__ import _missing, _parser

    import live_steering.testing._postgres as postgres_binaries

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in absent else real(name, *a)
    )
    monkeypatch.setattr(
        postgres_binaries, "find_binaries", lambda: "/usr/lib/postgresql/15/bin" if postgres else None
    )
    assert _missing(_parser().parse_args(argv)) == []
