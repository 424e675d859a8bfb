"""Shared pytest configuration: both anyio backends for every async test (STYLE.md), the
``--runslow`` switch for the long runs behind docs/reliability.md's figures, and Hypothesis
settings that hold on a loaded machine."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from fleet_helpers import FleetStore
from hooks_helpers import HookWhere

# A loaded CI machine makes examples slow, not wrong: no per-example deadline and no too_slow
# health check for any Hypothesis test (tests never assert wall-clock times; see
# docs/reliability.md, "A loaded machine"). Loaded here, before any test module builds its settings.
settings.register_profile("live-steering", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("live-steering")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each ``pytest.mark.anyio`` test once on asyncio and once on trio."""
    backend: str = request.param
    return backend


# -- the run's own temp folder: nothing left behind (issue 25) ------------------------------
# Every temp file of the run, the suite's and its child processes' (TMPDIR is inherited: vendor
# CLIs, fleet nodes, PostgreSQL), lands in one folder made for the run. At the end, anything in
# it but pytest's own tmp_path tree is a leftover: the run fails and names it. Short (a socket's
# path has 107 bytes at most), and outside the patterns the fleet's sweep looks at.
_RUN_TEMP_KEY = pytest.StashKey[str]()
_OWN_TEMP = ("pytest-of-",)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # pragma: no cover - xdist worker: the controller's folder
        return
    folder = tempfile.mkdtemp(prefix="lss-")
    os.chmod(folder, 0o1777)  # a temp folder as /tmp is: PostgreSQL runs as its own user in it
    config.stash[_RUN_TEMP_KEY] = folder
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def leftovers(folder: str) -> list[str]:
    """What the run left in its temp folder, but pytest's own tmp_path tree."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [name for name in names if not name.startswith(_OWN_TEMP)]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    folder = session.config.stash.get(_RUN_TEMP_KEY, None)
    if folder is None:
        return
    left = leftovers(folder)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"the run left {len(left)} entries in its temp folder {folder}: {', '.join(left[:20])}"
        if reporter is not None:
            reporter.write_line(f"ERROR: {message}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif exitstatus == 0:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def vendor_temp(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """A real client's or the browser's test runs with a temp folder of its own, removed after
    it: the vendor CLIs leave their folders there (Claude Code's ``claude-0`` and ``cc-socks``,
    Qwen Code's ``qwen-socks-*``, tmux's ``tmux-0``), and Chromium its ``.org.chromium.Chromium.*``
    when chromedriver's quit ends it before its own clean-up (seen in one CI run of two), which
    are theirs to leave, not the suite's. Short, for the sockets they bind in it."""
    marker = request.node.get_closest_marker
    if marker("real_clients") is None and marker("browser") is None:
        yield
        return
    tmp_path_factory.getbasetemp()  # fixed in the run's folder before TMPDIR moves
    folder = tempfile.mkdtemp(prefix="c-")
    monkeypatch.setenv("TMPDIR", folder)
    monkeypatch.setenv("TMUX_TMPDIR", folder)
    monkeypatch.setattr(tempfile, "tempdir", None)
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--runslow",
        action="store_true",
        default=False,
        help="also run tests marked slow (long Hypothesis runs for docs/reliability.md)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


# -- fleet (tests/test_fleet*.py): a throwaway PostgreSQL cluster and the two stores --------


def started_cluster() -> Iterator[Any]:
    """A PostgreSQL cluster (initdb + postgres on a Unix socket) for a fixture, stopped by pid after.

    Skips when PostgreSQL is not installed, unless ``LIVE_STEERING_REQUIRE_PG=1`` (CI): then fails.
    """
    from live_steering.testing._postgres import PostgresCluster, find_binaries

    if find_binaries() is None:
        message = "PostgreSQL is not installed (/usr/lib/postgresql/*/bin)"
        if os.environ.get("LIVE_STEERING_REQUIRE_PG") == "1":
            pytest.fail(f"{message}, and LIVE_STEERING_REQUIRE_PG=1")
        pytest.skip(message)
    cluster = PostgresCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A PostgreSQL cluster started for this run, shared by the tests that only read and write it."""
    for cluster in started_cluster():
        yield cluster.dsn


@pytest.fixture
def own_cluster() -> Iterator[Any]:
    """A PostgreSQL cluster of the test's own (it is stopped, restarted, its backends ended)."""
    yield from started_cluster()


@pytest.fixture(params=["sqlite", "postgres"])
def fleet_store(request: pytest.FixtureRequest, tmp_path: Path) -> FleetStore:
    """Each fleet test once on a SQLite file and once on the PostgreSQL cluster."""
    if request.param == "sqlite":
        return FleetStore("sqlite", str(tmp_path / "fleet.db"))
    dsn: str = request.getfixturevalue("postgres_dsn")
    return FleetStore("postgres", dsn)


# -- the hook relay (tests/test_hooks_relay*.py): its store on SQLite and on PostgreSQL ------


@pytest.fixture(params=["sqlite", "postgres"])
def hook_store(request: pytest.FixtureRequest, tmp_path: Path) -> HookWhere:
    """Each relay conformance test once on a SQLite file and once on PostgreSQL (a fresh schema)."""
    if request.param == "sqlite":
        return HookWhere("sqlite", path=str(tmp_path / "hooks.db"))
    import uuid

    import psycopg

    dsn: str = request.getfixturevalue("postgres_dsn")
    schema = f"hooks_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return HookWhere("postgres", dsn=f"{dsn} options='-c search_path={schema}'")
