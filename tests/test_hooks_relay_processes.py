"""The hook relay across real processes: end to end per vendor, concurrency, SIGKILL, bad input (C26b).

Every process here is a real ``live-steering`` command or a worker of
``live_steering.testing._relay_worker`` (the same ``run_hook`` with a kill switch).
Runs are bounded so that the file takes a few seconds; ``--runslow`` runs the big ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest

from hooks_helpers import HookWhere
from live_steering.hooks import SqliteHookStore, _vendors, _versions
from process_helpers import stopped

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "hooks"
BIN = pathlib.Path(sys.executable).parent
CLI = (
    [str(BIN / "live-steering")]
    if (BIN / "live-steering").exists()
    else [sys.executable, "-m", "live_steering._cli"]
)
WORKER = [sys.executable, "-m", "live_steering.testing._relay_worker"]
BOUND = 60  # seconds any one process may take before the test fails (a bound, not a measurement)


def reply_text(reply: dict[str, Any]) -> str:
    """The text a Claude Code reply carries: additionalContext, or the Stop decision's reason."""
    if "hookSpecificOutput" in reply:
        return str(reply["hookSpecificOutput"]["additionalContext"])
    assert reply["decision"] == "block"
    return str(reply["reason"])


def fixture_bytes(vendor: str, moment: str) -> bytes:
    return (FIXTURES / vendor / f"{moment}.json").read_bytes()


def session_of(vendor: str, moment: str) -> str:
    payload = json.loads(fixture_bytes(vendor, moment))
    facts = _vendors.FACTS[vendor]
    return str(next(payload[f] for f in facts.session_id_fields if f in payload))


def run(
    args: list[str], data: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(args, input=data, capture_output=True, timeout=BOUND, check=False, env=env)


# -- end to end, per vendor ------------------------------------------------------------------

#: vendor -> (a held or ineligible moment, an eligible moment, the expected reply for two instructions)
E2E = {
    "claude-code": (
        "PermissionRequest",
        "PostToolUse",
        b'{"hookSpecificOutput":{"hookEventName":"PostToolUse",'
        b'"additionalContext":"Use the corrected path\\n\\nRun the tests before committing"}}\n',
    ),
    "codex": (
        "PermissionRequest",
        "UserPromptSubmit",
        b'{"hookSpecificOutput":{"hookEventName":"UserPromptSubmit",'
        b'"additionalContext":"Use the corrected path\\n\\nRun the tests before committing"}}\n',
    ),
    "qwen-code": (
        "PreToolUse",  # Qwen Code throws PreToolUse context away: never a delivery moment
        "PostToolUse",
        b'{"hookSpecificOutput":{"hookEventName":"PostToolUse",'
        b'"additionalContext":"Use the corrected path\\n\\nRun the tests before committing"}}\n',
    ),
    "vscode": (
        None,
        "SessionStart",
        b'{"hookSpecificOutput":{"hookEventName":"SessionStart",'
        b'"additionalContext":"Use the corrected path\\n\\nRun the tests before committing"}}\n',
    ),
    "hermes": (
        "pre_tool_call",
        "pre_llm_call",
        b'{"context":"Use the corrected path\\n\\nRun the tests before committing"}\n',
    ),
}


@pytest.mark.parametrize("vendor", sorted(E2E))
def test_end_to_end_instruct_then_hook_processes(tmp_path: pathlib.Path, vendor: str) -> None:
    """instruct in one process, hook commands fed the vendor's stdin in others: the reply byte for byte."""
    store = str(tmp_path / "hooks.db")
    held, eligible, expected = E2E[vendor]
    session = session_of(vendor, eligible)
    for n, text in enumerate(["Use the corrected path", "Run the tests before committing"]):
        done = run(
            [
                *CLI,
                "instruct",
                session,
                text,
                "--id",
                f"cmd-{n}",
                "--vendor",
                vendor,
                "--store",
                store,
                "--json",
            ]
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["disposition"] == "queued"
    if held is not None:
        quiet = run([*CLI, "hook", vendor, "--store", store], fixture_bytes(vendor, held))
        assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, b"", b"")
    reply = run([*CLI, "hook", vendor, "--store", store], fixture_bytes(vendor, eligible))
    assert (reply.returncode, reply.stderr) == (0, b"")
    assert reply.stdout == expected
    end = _vendors.FACTS[vendor].session_end_moment
    if end is not None:
        run([*CLI, "instruct", session, "Too late", "--id", "cmd-2", "--store", store])
        assert run([*CLI, "hook", vendor, "--store", store], fixture_bytes(vendor, end)).stdout == b""
    events = run([*CLI, "hooks", "events", "--session", session, "--json", "--store", store])
    kinds = [json.loads(line)["type"] for line in events.stdout.splitlines()]
    assert kinds.count("control.accepted") == (3 if end else 2)
    assert kinds.count(f"x.{vendor}.instruction.delivered") == 2
    assert kinds.count(f"x.{vendor}.instruction.dropped") == (1 if end else 0)
    repeat = run(
        [*CLI, "instruct", session, "Use the corrected path", "--id", "cmd-0", "--store", store, "--json"]
    )
    assert repeat.returncode == 0
    assert json.loads(repeat.stdout)["disposition"] == "applied"


def test_instruct_exit_codes(tmp_path: pathlib.Path) -> None:
    """instruct exits 0 when accepted or repeated, 1 when refused (receipt printed), 2 for usage errors."""
    store = str(tmp_path / "hooks.db")
    assert run([*CLI, "instruct", "s", "t", "--id", "c", "--store", store]).returncode == 0
    assert run([*CLI, "instruct", "s", "t", "--id", "c", "--store", store]).returncode == 0
    refused = run([*CLI, "instruct", "s", "other", "--id", "c", "--store", store, "--json"])
    assert refused.returncode == 1
    assert json.loads(refused.stdout)["reason"] == "identity-conflict"
    assert run([*CLI, "instruct", "s", "--store", store]).returncode == 2
    assert run([*CLI, "instruct", "s", "t", "--vendor", "emacs", "--store", store]).returncode == 2


# -- bad input, against the real command -------------------------------------------------------

BAD_INPUTS = {
    "malformed": (b'{"session_id": ', "claude-code", "malformed-input"),
    "empty": (b"", "claude-code", "empty-input"),
    "unknown-vendor": (fixture_bytes("claude-code", "Stop"), "cursor", "unknown-vendor"),
    "unknown-moment": (
        b'{"session_id": "s", "hook_event_name": "Teleport"}',
        "claude-code",
        "unknown-moment",
    ),
    "no-session": (b'{"hook_event_name": "PostToolBatch"}', "claude-code", "missing-session-id"),
    "non-utf8": (b'{"session_id": "s\xc3\x28", "hook_event_name": "Stop"}', "claude-code", "malformed-input"),
    "ten-megabytes": (
        b'{"session_id": "s", "pad": "' + b"x" * 10_000_000 + b'"}',
        "claude-code",
        "stdin-too-large",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_0_says_nothing_and_is_recorded(tmp_path: pathlib.Path, case: str) -> None:
    """Malformed, empty, unknown vendor/moment, no session id, non-UTF-8, 10 MB: exit 0, no reply, audited."""
    store = str(tmp_path / "hooks.db")
    data, vendor, reason = BAD_INPUTS[case]
    done = run([*CLI, "hook", vendor, "--store", store], data)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    with SqliteHookStore(store) as s:
        (event,) = s.events()
    assert str(event["type"]).endswith("hook.failed")
    assert event["reason"] == reason


def test_locked_store_gives_up_after_the_bounded_wait(tmp_path: pathlib.Path) -> None:
    """A store locked by another process: the hook waits its bounded time, exits 0 silently, loses nothing."""
    store = str(tmp_path / "hooks.db")
    with SqliteHookStore(store) as s:
        s.enqueue("s", "c", "t")
    locker = sqlite3.connect(store, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    try:
        payload = b'{"session_id": "s", "hook_event_name": "PostToolUse"}'
        done = run([*CLI, "hook", "claude-code", "--store", store], payload)
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert (done.returncode, done.stdout) == (0, b"")
    assert b"locked" in done.stderr
    with SqliteHookStore(store) as s:
        assert s.receipt("s", "c").state == "queued"  # type: ignore[union-attr]


# -- concurrency ----------------------------------------------------------------------------


def concurrency(
    tmp_path: pathlib.Path, total: int, hook_processes: int, sessions: int, where: HookWhere | None = None
) -> None:
    where = where if where is not None else HookWhere("sqlite", path=str(tmp_path / "hooks.db"))
    store = where.path if where.path is not None else f"pg:{where.dsn}"
    where.open().close()
    names = [f"session-{n}" for n in range(sessions)]
    # two instructing processes, each sending its half to every session in turn
    plans: list[list[list[str]]] = [[], []]
    for n in range(total):
        session = names[n % sessions]
        plans[n % 2].append([session, f"i{n % 2}-{n}", f"{session} instruction {n}"])
    plan_files = [tmp_path / f"plan-{n}.json" for n in range(2)]
    for plan, plan_file in zip(plans, plan_files, strict=True):
        plan_file.write_text(json.dumps(plan))
    payloads = [
        {"session_id": name, "hook_event_name": moment}
        for name in names
        for moment in ("PostToolUse", "Stop")
    ]
    with contextlib.ExitStack() as children:  # each child stopped by its pid, whatever happens

        def start(*argv: str) -> subprocess.Popen[bytes]:
            return children.enter_context(stopped(subprocess.Popen(argv, stdout=subprocess.PIPE), BOUND * 4))

        instructors = [start(*WORKER, "instruct", store, str(plan_file)) for plan_file in plan_files]
        hookers = [
            start(*WORKER, "hooks", "claude-code", store, json.dumps(payloads[i:] + payloads[:i]), str(total))
            for i in range(hook_processes)
        ]
        outputs = [p.communicate(timeout=BOUND * 4)[0] for p in instructors + hookers]
    assert all(p.returncode == 0 for p in instructors + hookers)
    receipts = [json.loads(line) for out in outputs[:2] for line in out.splitlines()]
    assert len(receipts) == total
    assert all(r["state"] == "queued" for r in receipts)  # every one accepted (queue-full was retried)
    delivered_texts: Counter[str] = Counter()
    for out in outputs[2:]:
        for line in out.splitlines():
            record = json.loads(line)
            if "stderr" in record:  # a moment that gave up on the lock after the bounded wait: allowed
                assert "is locked" in record["stderr"] or "lock timeout" in record["stderr"], record
                continue
            context = reply_text(record["reply"])
            for text in context.split("\n\n"):
                assert text.startswith(record["session_id"] + " ")  # never another session's instruction
                delivered_texts[text] += 1
    assert max(delivered_texts.values()) == 1  # at most once
    assert len(delivered_texts) == total  # none lost
    with where.open() as s:
        rows = s.instructions()
        events = s.events(limit=100 * total)
    assert Counter(r["state"] for r in rows) == {"delivered": total}
    for name in names:  # FIFO per session: claims follow arrival order
        arrival = [r["command_id"] for r in rows if r["session_id"] == name]
        mine = [e for e in events if e["session_id"] == name]
        claimed = [e["command_id"] for e in mine if str(e["type"]).endswith("delivering")]
        assert claimed == arrival
    kinds = Counter(str(e["type"]) for e in events)
    assert kinds["control.accepted"] == kinds["x.claude-code.instruction.delivered"] == total
    sequences = [int(str(e["sequence"])) for e in events]
    if where.path is not None:
        assert sequences == list(range(1, len(events) + 1))
    else:  # a BIGSERIAL: unique and increasing in commit order per session; a rolled-back step leaves a gap
        assert sequences == sorted(set(sequences))


def test_concurrent_sessions_hooks_and_instructors(tmp_path: pathlib.Path) -> None:
    """3 sessions, 8 hook and 2 instructing processes, 1,000 instructions: once each, FIFO, none lost."""
    concurrency(tmp_path, total=1_000, hook_processes=8, sessions=3)


def test_concurrent_hooks_share_one_postgres_queue(tmp_path: pathlib.Path, postgres_dsn: str) -> None:
    """On PostgreSQL (agents on many machines): 2 instructing and 4 hook processes, 120 instructions
    over 3 sessions: each delivered at most once and none lost, FIFO per session."""
    import uuid

    import psycopg

    schema = f"hooks_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    where = HookWhere("postgres", dsn=f"{postgres_dsn} options='-c search_path={schema}'")
    concurrency(tmp_path, total=120, hook_processes=4, sessions=3, where=where)


@pytest.mark.slow
def test_concurrent_sessions_hooks_and_instructors_long(tmp_path: pathlib.Path) -> None:
    """The same with 10,000 instructions over 5 sessions and 12 hook processes."""
    concurrency(tmp_path, total=10_000, hook_processes=12, sessions=5)


# -- crash: SIGKILL at random points -----------------------------------------------------------

HOOK_POINTS = ("claim", "before-commit", "claimed", "replied", "finish")
INSTRUCT_POINTS = ("enqueue", "before-commit")


def check_store(store: str) -> None:
    """No half-written rows: integrity ok, states match their last event, nothing delivered twice."""
    conn = sqlite3.connect(store)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = conn.execute("SELECT session_id, command_id, state, claim FROM instructions").fetchall()
        events = conn.execute(
            "SELECT type, session_id, command_id FROM events WHERE command_id IS NOT NULL ORDER BY sequence"
        ).fetchall()
    finally:
        conn.close()
    last: dict[tuple[str, str], str] = {}
    delivered: Counter[tuple[str, str]] = Counter()
    for type_, session, command in events:
        key = (session, command)
        if type_ == "control.repeated" or type_ == "control.rejected":
            continue
        last[key] = type_.rsplit(".", 1)[-1]
        if type_.endswith("instruction.delivered"):
            delivered[key] += 1
    assert all(n == 1 for n in delivered.values())
    for session, command, state, claim in rows:
        expected = {"queued": "accepted"}.get(state, state)
        assert last[(session, command)] == expected, (command, state, last[(session, command)])
        if state in ("delivering", "unknown", "delivered"):
            assert claim is not None


def crash_runs(tmp_path: pathlib.Path, runs: int, seed: int) -> None:
    rng = random.Random(seed)
    store = str(tmp_path / "hooks.db")
    SqliteHookStore(store).close()
    seen_replies: Counter[str] = Counter()
    kills = 0
    for run_no in range(runs):
        session = f"s{run_no % 3}"
        env = dict(os.environ)
        if rng.random() < 0.35:  # kill an instructing process
            plan = [
                [session, f"r{run_no}-{k}", f"{session} text {run_no}-{k}"] for k in range(rng.randint(1, 3))
            ]
            env["LIVE_STEERING_KILL"] = f"{rng.choice(INSTRUCT_POINTS)}:{rng.randint(1, len(plan))}"
            plan_file = tmp_path / f"plan-{run_no}.json"
            plan_file.write_text(json.dumps(plan))
            done = run([*WORKER, "instruct", store, str(plan_file)], env=env)
        else:  # queue something, then kill a hook process at a random point
            SqliteHookStore(store).enqueue(session, f"r{run_no}", f"{session} text {run_no}")
            env["LIVE_STEERING_KILL"] = f"{rng.choice(HOOK_POINTS)}:1"
            moment = rng.choice(("PostToolUse", "Stop", "UserPromptSubmit"))
            payload = json.dumps({"session_id": session, "hook_event_name": moment}).encode()
            done = run([*WORKER, "hook", "claude-code", store], payload, env=env)
            if done.stdout:
                for text in reply_text(json.loads(done.stdout)).split("\n\n"):
                    seen_replies[text] += 1
        kills += done.returncode == -signal.SIGKILL
        check_store(store)
        # the next command of the session finalises what the dead process left delivering
        after = run(
            [*CLI, "hook", "claude-code", "--store", store],
            json.dumps({"session_id": session, "hook_event_name": "PostToolUse"}).encode(),
        )
        assert after.returncode == 0
        if after.stdout:
            for text in json.loads(after.stdout)["hookSpecificOutput"]["additionalContext"].split("\n\n"):
                seen_replies[text] += 1
        check_store(store)
    assert kills >= runs * 0.6  # most runs really died at their kill point
    assert max(seen_replies.values(), default=1) == 1  # never delivered twice, across every crash
    with SqliteHookStore(store) as s:
        s.recover()
        states = Counter(str(r["state"]) for r in s.instructions())
    assert states["delivering"] == 0  # every claim of a dead process was finalised
    assert states["unknown"] > 0  # and some were: kills between claim and confirm happened
    check_store(store)


def test_sigkill_at_random_points_never_delivers_twice(tmp_path: pathlib.Path) -> None:
    """36 hook and instruct processes SIGKILLed at random points: integrity ok, no half rows, no repeat."""
    crash_runs(tmp_path, runs=36, seed=12)


@pytest.mark.slow
def test_sigkill_at_random_points_long(tmp_path: pathlib.Path) -> None:
    """The same over 300 runs."""
    crash_runs(tmp_path, runs=300, seed=99)


def test_console_script_is_installed() -> None:
    """The tests above ran the installed ``live-steering`` console script, as a vendor would."""
    assert shutil.which("live-steering", path=str(BIN)) is not None


def test_hook_command_imports_only_what_it_needs(tmp_path: pathlib.Path) -> None:
    """The console script's hook path loads no anyio, attrs, argparse, typing, psycopg or runtime module."""
    probe = (
        "import sys\n"
        "from live_steering._cli import main\n"
        "code = main(['hook', 'claude-code', '--store', sys.argv[1]])\n"
        "heavy = {'anyio', 'attrs', 'argparse', 'typing', 'sortedcontainers', 'psycopg'}\n"
        "runtime = ('live_steering._runtime', 'live_steering._core', 'live_steering._events')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in runtime)\n"
        "print(repr(loaded), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    store = str(tmp_path / "hooks.db")
    with SqliteHookStore(store) as s:
        s.enqueue("s", "c", "t")
    done = run([sys.executable, "-c", probe, store], b'{"session_id": "s", "hook_event_name": "PostToolUse"}')
    assert done.returncode == 0
    assert done.stdout == b'{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"t"}}\n'
    assert done.stderr == b"[]\n"


# -- the other commands --------------------------------------------------------------------


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_hooks_events_follow_tails_until_interrupted(tmp_path: pathlib.Path) -> None:
    """hooks events --follow prints what exists, then new events as they come, and exits 0 on Ctrl-C."""
    store = str(tmp_path / "hooks.db")
    with SqliteHookStore(store) as s:
        s.enqueue("s", "c1", "first")
    follower = subprocess.Popen(
        [*CLI, "hooks", "events", "--follow", "--json", "--store", store],
        stdout=subprocess.PIPE,
        # a suite started in the background (bash's '&') inherits SIGINT ignored, and Python then
        # installs no KeyboardInterrupt handler: give the follower the terminal's default
        preexec_fn=_default_sigint,
    )
    with stopped(follower, BOUND):  # by its pid if it hangs: a readline below then ends (EOF)
        try:
            assert follower.stdout is not None
            first = json.loads(follower.stdout.readline())
            with SqliteHookStore(store) as s:
                s.enqueue("s", "c2", "second")
            second = json.loads(follower.stdout.readline())
        finally:
            follower.send_signal(signal.SIGINT)
            code = follower.wait(timeout=BOUND)
            if follower.stdout is not None:
                follower.stdout.close()
    assert (first["cause"], second["cause"]) == ("c1", "c2")
    assert second["sequence"] == first["sequence"] + 1
    assert code == 0


def test_hooks_install_write_sessions_and_recover_commands(tmp_path: pathlib.Path) -> None:
    """hooks install --write merges a settings file; hooks sessions lists ids; hooks recover reports."""
    store = str(tmp_path / "hooks.db")
    settings = tmp_path / "settings.json"
    settings.write_text('{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "./notify.sh"}]}]}}')
    done = run([*CLI, "hooks", "install", "claude-code", "--store", store, "--write", str(settings)])
    assert done.returncode == 0, done.stderr
    stop = json.loads(settings.read_text())["hooks"]["Stop"]
    assert stop[0]["hooks"][0]["command"] == "./notify.sh"
    assert "hook claude-code --store" in stop[1]["hooks"][0]["command"]
    printed = run([*CLI, "hooks", "install", "codex", "--store", store])
    assert set(json.loads(printed.stdout)["hooks"]) == set(_versions.TABLES["codex"][-1].moments)
    hook_cmd = shlex.split(stop[1]["hooks"][0]["command"])  # the installed command runs as written
    assert run(hook_cmd, fixture_bytes("claude-code", "SessionStart")).returncode == 0
    listed = run([*CLI, "hooks", "sessions", "--json", "--store", store])
    assert [json.loads(line)["session_id"] for line in listed.stdout.splitlines()] == [
        session_of("claude-code", "SessionStart")
    ]
    recovered = run([*CLI, "hooks", "recover", "--json", "--store", store])
    assert json.loads(recovered.stdout) == {"unknown": []}


@pytest.mark.parametrize("args", [[], ["--store"], ["claude-code", "extra"]])
def test_hook_usage_error_never_blocks_the_agent(tmp_path: pathlib.Path, args: list[str]) -> None:
    """A mistyped hook config exits 0 (2 would block the tool call): usage on stderr, recorded, no stdout."""
    store = str(tmp_path / "hooks.db")
    env = {**os.environ, "LIVE_STEERING_STORE": store}
    done = run([*CLI, "hook", *args], b'{"session_id": "s", "hook_event_name": "PreToolUse"}', env)
    assert (done.returncode, done.stdout) == (0, b"")
    assert b"usage: live-steering hook VENDOR" in done.stderr
    with SqliteHookStore(store) as s:
        failed = [e for e in s.events() if e["type"] == "hook.failed"]
    assert [e["reason"] for e in failed] == ["usage-error"]


def test_dsn_selects_postgres_for_every_relay_command(tmp_path: pathlib.Path, postgres_dsn: str) -> None:
    """instruct, hook, hooks events/sessions/recover take --dsn (or $LIVE_STEERING_STORE_DSN), and
    hooks install bakes --dsn into the vendor's command."""
    import uuid

    import psycopg

    schema = f"hooks_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    dsn = f"{postgres_dsn} options='-c search_path={schema}'"
    sent = run([*CLI, "instruct", "s-pg", "Use the corrected path", "--id", "c1", "--dsn", dsn, "--json"])
    assert (sent.returncode, json.loads(sent.stdout)["disposition"]) == (0, "queued"), sent.stderr
    env = {**os.environ, "LIVE_STEERING_STORE_DSN": dsn}
    payload = json.dumps({"session_id": "s-pg", "hook_event_name": "PostToolUse"}).encode()
    reply = run([*CLI, "hook", "claude-code"], payload, env=env)  # the DSN from the environment
    assert (reply.returncode, reply.stderr) == (0, b"")
    assert json.loads(reply.stdout)["hookSpecificOutput"]["additionalContext"] == "Use the corrected path"
    events = run([*CLI, "hooks", "events", "--json", "--dsn", dsn])
    kinds = [json.loads(line)["type"] for line in events.stdout.splitlines()]
    assert kinds == [
        "control.accepted",
        "x.claude-code.instruction.delivering",
        "x.claude-code.instruction.delivered",
    ]
    sessions = run([*CLI, "hooks", "sessions", "--json", "--dsn", dsn])
    assert json.loads(sessions.stdout)["session_id"] == "s-pg"
    recovered = run([*CLI, "hooks", "recover", "--json", "--dsn", dsn])
    assert json.loads(recovered.stdout) == {"unknown": []}
    block = run([*CLI, "hooks", "install", "claude-code", "--dsn", dsn])
    assert (
        f"hook claude-code --dsn {shlex.quote(dsn)}"
        in json.loads(block.stdout)["hooks"]["Stop"][0]["hooks"][0]["command"]
    )
    both = run([*CLI, "instruct", "s-pg", "t", "--dsn", dsn, "--store", str(tmp_path / "h.db")])
    assert both.returncode == 2


def test_unreachable_dsn_never_blocks_the_agent(tmp_path: pathlib.Path) -> None:
    """A DSN whose server is not there: the hook command exits 0 with no reply, the reason on stderr."""
    payload = json.dumps({"session_id": "s", "hook_event_name": "PostToolBatch"}).encode()
    dsn = f"host={tmp_path} port=1 user=nobody dbname=nothing"
    done = run([*CLI, "hook", "claude-code", "--dsn", dsn], payload)
    assert (done.returncode, done.stdout) == (0, b"")
    assert b"cannot open the hook store" in done.stderr
