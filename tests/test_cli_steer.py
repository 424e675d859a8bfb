"""``live-steering steer``, ``receipts`` on a fleet store and ``demo --fleet``: the fleet from a shell."""

from __future__ import annotations

import io
import json
import sqlite3
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from fleet_helpers import BOUND, FleetStore, new_session, spawn
from live_steering import Disposition, Input, LiveRuntime
from live_steering._cli import main
from live_steering._cli._demo_fleet import run_fleet_demo
from live_steering.fleet import SQLiteFleet

#: These tests leave generations with steers pending on purpose, to see them held across the
#: store (C17, C23); the library's warning for a forgotten checkpoint decision is not their subject.
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::live_steering.CheckpointDecisionWarning"),
]


def _store_args(store: FleetStore) -> list[str]:
    return ["--store", store.location] if store.kind == "sqlite" else ["--dsn", store.location]


async def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = await anyio.to_thread.run_sync(main, argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_steer_reaches_the_owner_and_receipts_reads_the_store(
    fleet_store: FleetStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """steer prints the owner's receipt (anchored to the running generation); receipts lists it."""
    session = new_session()
    where = _store_args(fleet_store)
    async with (
        fleet_store.fleet("owner") as owner,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1"),
    ):
        await owner.flush(session)
        code, out, _ = await _cli(["steer", *where, session, "Use X", "--id", "m-1", "--json"], capsys)
        assert code == 0
        assert json.loads(out) == {
            "accepted": True,
            "inputId": "m-1",
            "generationId": "g1",
            "disposition": "queued",
        }
        assert runtime.receipt("m-1") is not None
        code, out, _ = await _cli(["steer", *where, session, "Other", "--id", "m-1"], capsys)
        assert (code, out) == (1, "m-1: refused (identity-conflict)\n")
        code, out, _ = await _cli(
            ["steer", *where, session, "Old", "--id", "m-2", "--generation", "g0"], capsys
        )
        assert (code, out) == (1, "m-2: refused (stale-generation)\n")
    if fleet_store.kind == "sqlite":
        argv = ["receipts", fleet_store.location, "--session", session, "--json"]
    else:
        argv = ["receipts", "--dsn", fleet_store.location, "--session", session, "--json"]
    code, out, _ = await _cli(argv, capsys)
    assert code == 0
    (line,) = [json.loads(text) for text in out.splitlines()]
    assert (line["inputId"], line["disposition"], line["reason"]) == ("m-1", "held", "generation-stopped")
    code, out, _ = await _cli([*argv[:-1]], capsys)
    assert code == 0
    header = ["ID", "KIND", "GENERATION", "DISPOSITION", "REASON", "WHEN", "RUNTIME"]
    assert out.splitlines()[0].split() == header
    assert f"{session}#1" in out


async def test_steer_without_a_running_generation_says_so(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing store or a bad timeout exit 2; with no generation running a new id is refused
    stale-generation (exit 1, the receipt printed), as a submit no owner decides is."""
    store = FleetStore("sqlite", f"{tmp_path}/fleet.db")
    code, out, err = await _cli(["steer", "--store", store.location, "nobody", "hi", "--id", "a"], capsys)
    assert (code, out) == (2, "")
    assert "no fleet store" in err  # a mistyped path creates nothing
    async with store.fleet("creates-it"):
        pass
    code, out, err = await _cli(["steer", "--store", store.location, "nobody", "hi", "--id", "a"], capsys)
    assert (code, out, err) == (1, "a: refused (stale-generation)\n", "")
    code, out, _ = await _cli(
        ["steer", "--store", store.location, "nobody", "hi", "--id", "a", "--json"], capsys
    )
    assert code == 1
    assert json.loads(out) == {
        "accepted": False,
        "inputId": "a",
        "generationId": "",
        "disposition": None,
        "reason": "stale-generation",
    }
    code, _, err = await _cli(
        ["steer", "--store", store.location, "s", "hi", "--id", "a", "--timeout", "0"], capsys
    )
    assert code == 2
    assert "--timeout" in err
    code, out, _ = await _cli(
        ["steer", "--store", store.location, "nobody", "hi", "--id", "a", "--generation", "g"], capsys
    )
    assert (code, out) == (1, "a: refused (stale-generation)\n")


async def test_steer_repeat_without_an_owner_gets_its_stored_receipt(
    fleet_store: FleetStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """No live owner, no --generation: a repeat of a stored input gets its stored receipt (exit 0),
    other text under its id identity-conflict, a new id stale-generation (exit 1)."""
    session = new_session()
    where = fleet_store.args()
    async with (
        fleet_store.fleet("owner") as owner,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1"),
    ):
        await owner.submit(session, Input("steer", "Use X", id="m-1"), "g1")
    code, out, _ = await _cli(["steer", *where, session, "Use X", "--id", "m-1", "--json"], capsys)
    assert (code, json.loads(out)) == (
        0,
        {
            "accepted": True,
            "inputId": "m-1",
            "generationId": "g1",
            "disposition": "held",
            "reason": "generation-stopped",
        },
    )
    code, out, _ = await _cli(["steer", *where, session, "Other", "--id", "m-1"], capsys)
    assert (code, out) == (1, "m-1: refused (identity-conflict)\n")
    code, out, _ = await _cli(["steer", *where, session, "New", "--id", "m-2"], capsys)
    assert (code, out) == (1, "m-2: refused (stale-generation)\n")


async def test_steer_repeat_after_the_generation_moved_on_gets_its_current_receipt(
    fleet_store: FleetStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --generation while a later generation runs: a repeat of an input applied in an earlier
    one is answered with its current receipt (C10, exit 0), not identity-conflict."""
    session = new_session()
    where = fleet_store.args()
    async with fleet_store.fleet("owner") as owner, owner.own(LiveRuntime(session_id=session)) as runtime:
        async with runtime.open_generation("g1") as gen:
            assert (await owner.submit(session, Input("steer", "Use X", id="m-1"), "g1")).accepted
            await gen.boundary(lambda input, metadata: None)
            assert not gen.continue_after_checkpoint()
        async with runtime.open_generation("g2") as gen:
            await owner.flush(session)
            code, out, _ = await _cli(["steer", *where, session, "Use X", "--id", "m-1", "--json"], capsys)
            assert (code, json.loads(out)) == (
                0,
                {"accepted": True, "inputId": "m-1", "generationId": "g1", "disposition": "applied"},
            )
            code, out, _ = await _cli(["steer", *where, session, "Use Y", "--id", "m-1"], capsys)
            assert (code, out) == (1, "m-1: refused (identity-conflict)\n")
            gen.stop()


async def _sqlite_store(path: str) -> None:
    async with SQLiteFleet(path, node_id="creates-it"):
        pass


@pytest.mark.parametrize("session", ["", "x" * 200, "chat\udcff"])
@pytest.mark.parametrize("command", ["steer", "stop"])
def test_a_bad_session_id_is_a_usage_error(
    command: str, session: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty, 200-character or non-UTF-8 SESSION: one line on stderr, exit 2, no traceback."""
    path = str(tmp_path / "fleet.db")
    anyio.run(_sqlite_store, path)
    extra = ["New", "--id", "msg-10", "--generation", "gen-1", "--json"] if command == "steer" else []
    assert main([command, "--store", path, session, *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"live-steering {command}: SESSION must be")
    line.encode("utf-8")  # the bad id is shown escaped


def test_steer_json_is_valid_utf8_for_a_non_utf8_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--id $'u\\xff2' arrives as a lone surrogate: the JSON printed is valid UTF-8 (a \\udcff escape),
    and the id is refused invalid-input, as the core refuses it in-process (C7's one order)."""
    path = str(tmp_path / "fleet.db")
    anyio.run(_sqlite_store, path)
    assert main(["steer", "--store", path, "chat", "New", "--id", "u\udcff2", "--json"]) == 1
    out = capsys.readouterr().out
    assert "\\udcff" in out
    assert json.loads(out.encode("utf-8"))["inputId"] == "u\udcff2"
    assert main(["steer", "--store", path, "chat", "New", "--id", "u\udcff2"]) == 1
    assert capsys.readouterr().out == "u\\udcff2: refused (invalid-input)\n"


def test_store_paths_that_are_no_fleet_store_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory, a file that is not SQLite, a SQLite file without the fleet's tables: each
    refused in one line (exit 2), and nothing is written to them."""
    foreign = tmp_path / "other.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE notes (text TEXT)")
    conn.commit()
    conn.close()
    before = foreign.read_bytes()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite" * 10)
    for command, extra in (("steer", ["hi", "--id", "a"]), ("stop", [])):
        for path, says in (
            (tmp_path, "is a directory"),
            (garbage, "no fleet store"),
            (foreign, "no fleet tables"),
        ):
            assert main([command, "--store", str(path), "s", *extra]) == 2
            captured = capsys.readouterr()
            (line,) = captured.err.splitlines()
            assert says in line, line
            assert captured.out == ""
    assert foreign.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.db", "other.db"]


def test_a_malformed_dsn_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """--dsn nonsense: one line on stderr with no blank line after it (exit 2; receipts: 1)."""
    for argv, status in (
        (["steer", "--dsn", "nonsense", "s", "hi", "--id", "a"], 2),
        (["stop", "--dsn", "nonsense", "s"], 2),
        (["receipts", "--dsn", "nonsense"], 1),
    ):
        assert main(argv) == status
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert "nonsense" in err


def test_a_missing_postgres_extra_is_exit_2_with_the_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without psycopg, steer, stop and receipts --dsn all exit 2 naming the extra to install."""
    import live_steering.fleet

    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "live_steering.fleet._postgres", raising=False)
    monkeypatch.delattr(live_steering.fleet, "_postgres", raising=False)
    for argv in (
        ["steer", "--dsn", "dbname=x", "s", "hi", "--id", "a"],
        ["stop", "--dsn", "dbname=x", "s"],
        ["receipts", "--dsn", "dbname=x"],
    ):
        assert main(argv) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert "--dsn needs the 'postgres' extra: pip install 'live-steering[postgres]'" in line


def test_an_empty_database_is_no_fleet_store(postgres_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """steer, stop and receipts --dsn on a database without the fleet's tables refuse it in one line
    (steer and stop exit 2, receipts 1) and create no table there."""
    import psycopg

    name = f"empty_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    dsn = f"{postgres_dsn.replace('dbname=postgres', '')} dbname={name}"
    for argv, status in (
        (["steer", "--dsn", dsn, "s", "hi", "--id", "a", "--generation", "g"], 2),
        (["stop", "--dsn", dsn, "s"], 2),
        (["receipts", "--dsn", dsn], 1),
        (["receipts", "--dsn", dsn, "--recover"], 1),
    ):
        assert main(argv) == status
        captured = capsys.readouterr()
        (line,) = captured.err.splitlines()
        assert f"no fleet store in database {dsn!r}" in line, line
        assert captured.out == ""
    with psycopg.connect(dsn) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
    assert tables == (0,)


def test_receipts_names_both_kinds_of_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """receipts on a missing path says neither a journal nor a fleet store is there, on a directory
    that it is one (exit 1)."""
    missing = tmp_path / "fleet.db"
    assert main(["receipts", str(missing)]) == 1
    assert (
        capsys.readouterr().err
        == f"live-steering receipts: no receipt journal or fleet store at {str(missing)!r}\n"
    )
    assert main(["receipts", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"live-steering receipts: {str(tmp_path)!r} is a directory, not a receipt journal or fleet store\n"
    )


async def _owner_killed_mid_write(store: FleetStore, session: str, backend: str) -> None:
    """An owner in a child process: a-1 applied, b-1 being written (marked), c-1 queued; then kill -9."""
    child = await spawn(
        store,
        "owner",
        session,
        "--generation",
        "g1",
        "--hang-after",
        "1",
        "--node",
        "worker-x",
        backend=backend,
    )
    try:
        await child.next("owning")
        async with store.fleet("host") as host:
            await host.submit(session, Input("steer", "A", id="a-1"), "g1")
            with anyio.fail_after(BOUND):  # the child applies it
                await host.wait_final(session, "a-1")
            await host.submit(session, Input("steer", "B", id="b-1"), "g1")
            while (await child.next("context.write"))["input_id"] != "b-1":
                pass
            await host.submit(session, Input("steer", "C", id="c-1"), "g1")
    finally:
        await child.kill()
    conn = store.connection()
    try:
        with anyio.fail_after(BOUND):  # PostgreSQL frees the dead backend's lock once it sees the EOF
            while not await anyio.to_thread.run_sync(conn.owner_died, session):  # noqa: ASYNC110 - polls the store
                await anyio.sleep(0.01)
    finally:
        conn.close()


def _lease_sessions(store: FleetStore) -> list[str]:
    conn = store.connection()
    try:
        return conn.lease_sessions()
    finally:
        conn.close()


def _finals(out: str) -> dict[str, tuple[str, str | None]]:
    return {r["inputId"]: (r["disposition"], r["reason"]) for r in map(json.loads, out.splitlines())}


def _fresh_database(dsn: str) -> FleetStore:
    """A new, empty database on the test cluster (the shared one holds other tests' sessions)."""
    import psycopg

    name = f"recover_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    fresh = dsn.replace("dbname=postgres", f"dbname={name}")
    assert fresh != dsn
    return FleetStore("postgres", fresh)


async def test_receipts_recover_finalises_a_dead_owners_session(
    fleet_store: FleetStore, anyio_backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """receipts --recover on a fleet store: the dead owner's session is finalised as C23 says
    (marked -> unknown, else held, runtime-lost); a live owner's session is left alone; the notes
    before it tell the two apart."""
    if fleet_store.kind == "postgres":  # a database of its own: it counts every session of the store
        fleet_store = await anyio.to_thread.run_sync(_fresh_database, fleet_store.location)
    dead, live = new_session(), new_session()
    await _owner_killed_mid_write(fleet_store, dead, anyio_backend)
    source = [fleet_store.location] if fleet_store.kind == "sqlite" else ["--dsn", fleet_store.location]
    async with (
        fleet_store.fleet("live-owner") as owner,
        owner.own(LiveRuntime(session_id=live)) as runtime,
        runtime.open_generation("g1"),
    ):
        await owner.submit(live, Input("steer", "Wait", id="w-1"), "g1")
        code, _, err = await _cli(["receipts", *source], capsys)
        assert code == 0
        notes = err.splitlines()
        assert len(notes) == 2, notes
        assert (
            f"note: 1 queued in session {live!r}, whose live owner has them: they may still change" in notes
        )
        (dead_note,) = [note for note in notes if f"session {dead!r}" in note]
        assert dead_note.startswith(f"note: 2 queued in session {dead!r}, left by an owner that died; ")
        assert f"--session {dead} --recover' makes them 1 unknown (marked writing), 1 held" in dead_note
        code, _, err = await _cli(["receipts", *source, "--recover"], capsys)
        assert code == 0
        said = err.splitlines()
        assert (
            f"recovered session {dead!r}: its owner 'worker-x' is dead; "
            "2 left queued: 1 held, 1 unknown (marked writing), reason runtime-lost"
        ) in said
        assert f"session {live!r}: its owner 'live-owner' is live: left alone" in said
        sessions = len(await anyio.to_thread.run_sync(_lease_sessions, fleet_store))
        assert (
            f"{sessions} sessions: 1 recovered (owner dead), 1 left alone (live owner), "
            f"{sessions - 2} with no owner"
        ) in said
        code, out, _ = await _cli(["receipts", *source, "--session", dead, "--json"], capsys)
        assert _finals(out) == {
            "a-1": ("applied", None),
            "b-1": ("unknown", "runtime-lost"),
            "c-1": ("held", "runtime-lost"),
        }
        code, out, _ = await _cli(["receipts", *source, "--session", live, "--json"], capsys)
        assert _finals(out) == {"w-1": ("queued", None)}
        code, _, err = await _cli(["receipts", *source, "--session", dead, "--recover"], capsys)
        assert (code, err) == (0, f"session {dead!r}: no owner holds it: nothing to recover\n")
        code, out, err = await _cli(["receipts", *source, "--session", "", "--recover"], capsys)
        assert (code, out) == (2, "")
        assert err.startswith("live-steering receipts: --session must be")


async def test_receipts_needs_exactly_one_source(capsys: pytest.CaptureFixture[str]) -> None:
    """receipts with neither PATH nor --dsn is a usage error (exit 2), not a traceback."""
    code, _, err = await _cli(["receipts"], capsys)
    assert code == 2
    assert "PATH or --dsn" in err


async def test_demo_fleet_narrates_a_takeover(anyio_backend: str) -> None:
    """demo --fleet: applied through the store, then kill -9 and takeover give unknown and held."""
    out = io.StringIO()
    final = await run_fleet_demo(out, anyio_backend)
    assert {i: (r.disposition, r.reason) for i, r in final.items() if r is not None} == {
        "fix-1": (Disposition.APPLIED, None),
        "fix-2": (Disposition.UNKNOWN, "runtime-lost"),
        "fix-3": (Disposition.HELD, "runtime-lost"),
    }
    text = out.getvalue()
    assert "identity-conflict" in text
    assert "kill -9" in text


async def test_steer_follow_up_is_written_in_the_owners_next_generation(
    fleet_store: FleetStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """``steer --follow-up`` sends a follow-up (C29) through the store: queued for after the running
    generation, written at the first boundary of the next one, its stored receipt applied and
    anchored where it was sent; a follow-up the owner never ran is held on takeover (C23)."""
    session = new_session()
    where = _store_args(fleet_store)
    async with fleet_store.fleet("owner") as owner:
        runtime = LiveRuntime(session_id=session)
        async with owner.own(runtime):
            async with runtime.open_generation("g1") as gen:
                await owner.flush(session)
                argv = ["steer", *where, session, "Then test", "--id", "f-1", "--follow-up", "--json"]
                code, out, _ = await _cli(argv, capsys)
                assert code == 0
                assert json.loads(out)["disposition"] == "queued"
                assert await gen.boundary(lambda input, metadata: None) == []  # not in its anchor
                assert not gen.continue_after_checkpoint()
            written: list[tuple[str, str]] = []
            async with runtime.open_generation("g2") as gen2:
                await gen2.boundary(lambda input, metadata: written.append((input.id, metadata["delivery"])))
                assert not gen2.continue_after_checkpoint()
            await owner.flush(session)
            assert written == [("f-1", "follow_up")]
            stored = await owner.receipt(session, "f-1")
            assert stored is not None
            assert (stored.disposition, stored.generation_id) == (Disposition.APPLIED, "g1")
            async with runtime.open_generation("g3"):
                await owner.flush(session)
                argv = ["steer", *where, session, "And deploy", "--id", "f-2", "--follow-up"]
                code, out, _ = await _cli(argv, capsys)
                assert (code, out) == (0, "f-2: queued\n")
        # the owner released the session with f-2 held (runtime-closed); a new owner answers it
        async with fleet_store.fleet("owner-2") as second, second.own(LiveRuntime(session_id=session)):
            repeat = await second.submit(session, Input("follow_up", "And deploy", id="f-2"), "g3")
            assert (repeat.disposition, repeat.reason) == (Disposition.HELD, "runtime-closed")
    # the listing names each input's kind (the follow-ups beside the steers)
    store = [fleet_store.location] if fleet_store.kind == "sqlite" else ["--dsn", fleet_store.location]
    code, out, _ = await _cli(["receipts", *store, "--session", session], capsys)
    assert code == 0
    rows = {cells[0]: cells[1] for cells in (line.split() for line in out.splitlines()[1:])}
    assert rows == {"f-1": "follow_up", "f-2": "follow_up"}
