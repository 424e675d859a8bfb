"""``live-steering serve``: one-line errors, the loopback rule, a real run stopped by SIGTERM and
SIGINT on both servers, and the CLI paths that must never import Starlette."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import anyio
import pytest

from live_steering import Disposition
from live_steering.fleet import SQLiteFleet
from live_steering.hooks import instruct
from process_helpers import stopped

SERVE = [sys.executable, "-m", "live_steering._cli", "serve"]
TOKEN = "cli-token-123"


def make_fleet_store(path: Path) -> str:
    async def create() -> None:
        async with SQLiteFleet(str(path), node_id="maker"):
            pass

    anyio.run(create)
    return str(path)


def listening(proc: subprocess.Popen[str]) -> str:
    """The URL a `serve` process prints once it listens (its stderr in the failure otherwise)."""
    assert proc.stdout is not None
    assert proc.stderr is not None
    line = proc.stdout.readline()
    assert "listening on http://127.0.0.1:" in line, line + proc.stderr.read()
    return line.split("listening on ", 1)[1].strip()


def run(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        ([], {}, "give a fleet store"),
        (["--hooks-store", "h.db", "--host", "0.0.0.0"], {}, "not a loopback address"),
        (["--hooks-store", "h.db", "--host", "192.168.1.5"], {}, "not a loopback address"),
        (["--hooks-store", "h.db", "--token-env", "NO_SUCH_VAR_HERE"], {}, "not set or empty"),
        (["--hooks-store", "h.db", "--token-env", "EMPTY_TOKEN"], {"EMPTY_TOKEN": ""}, "not set or empty"),
        (["--store", "missing.db"], {}, "no fleet store at"),
        (["--hooks-store", "h.db", "--port", "70000"], {}, "not a port number"),
        (["--hooks-store", "not-a-db.txt"], {}, "file is not a database"),
        (["--store", "a.db", "--dsn", "host=x"], {}, "not allowed with argument"),
        (["--hooks-store", "h.db", "--hooks-dsn", "host=x"], {}, "not allowed with argument"),
        (["--hooks-dsn", "host=/no/such/dir dbname=x password=hunter2"], {}, "--hooks-dsn"),
    ],
)
def test_serve_refuses_in_one_line(tmp_path: Path, args: list[str], env: dict[str, str], words: str) -> None:
    """Usage and store problems: exit 2, one line on stderr, no traceback, nothing served."""
    (tmp_path / "not-a-db.txt").write_text("plain text, not SQLite\n" * 100)
    done = run(*args, env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "hunter2" not in done.stderr  # a DSN's password is never printed


def test_serve_serves_a_postgresql_hook_store(postgres_dsn: str) -> None:
    """--hooks-dsn: the hook sessions of a PostgreSQL hook store are listed and can be steered
    over HTTP, into the same store `instruct --dsn` writes; SIGTERM stops it, exit 0."""
    import uuid

    import psycopg

    schema = f"serve_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    dsn = f"{postgres_dsn} options='-c search_path={schema}'"
    instruct("pg-hook-1", "Use X", id="cmd-1", dsn=dsn)
    command = [*SERVE, "--hooks-dsn", dsn, "--port", "0"]
    with (
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc,
        stopped(proc),
    ):
        url = listening(proc)
        with urllib.request.urlopen(url + "v1/sessions", timeout=60) as answer:
            assert b'"pg-hook-1"' in answer.read()
        body = json.dumps({"kind": "steer", "id": "cmd-2", "text": "Then Y"}).encode()
        request = urllib.request.Request(
            url + "v1/sessions/pg-hook-1/inputs",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            receipt = json.loads(answer.read())
        assert (receipt["accepted"], receipt["inputId"], receipt["disposition"]) == (True, "cmd-2", "queued")
        assert instruct("pg-hook-1", "Then Y", id="cmd-2", dsn=dsn).disposition is Disposition.QUEUED
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_serve_reports_a_busy_port_in_one_line(tmp_path: Path) -> None:
    """An address already in use: exit 1, one line."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        done = run("--hooks-store", str(tmp_path / "h.db"), "--port", str(busy.getsockname()[1]))
    assert done.returncode == 1
    assert "cannot listen on 127.0.0.1" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("backend", "signum"),
    [
        ("asyncio", signal.SIGTERM),
        ("asyncio", signal.SIGINT),
        ("trio", signal.SIGTERM),
        ("trio", signal.SIGINT),
    ],
)
def test_serve_runs_and_stops_gracefully(tmp_path: Path, backend: str, signum: int) -> None:
    """The console and the API answer on the port it prints; SIGTERM or SIGINT stops it: exit 0.
    An event stream open then ends cleanly (its chunked body terminated), at once rather than at
    the end of the server's graceful wait, and the server logs nothing about it."""
    store = make_fleet_store(tmp_path / "fleet.db")
    hooks = str(tmp_path / "hooks.db")
    instruct("hook-7", "Use X", id="cmd-1", store=hooks)
    command = [
        *SERVE,
        "--store",
        store,
        "--hooks-store",
        hooks,
        "--port",
        "0",
        "--token-env",
        "SERVE_TOKEN",
        "--backend",
        backend,
    ]
    env = {**os.environ, "SERVE_TOKEN": TOKEN}
    with (
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc,
        stopped(proc),
    ):
        url = listening(proc)
        with urllib.request.urlopen(url, timeout=60) as page:
            assert b"live-steering console" in page.read()
        request = urllib.request.Request(url + "v1/sessions", headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert b'"hook-7"' in answer.read()
        host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
        stream = http.client.HTTPConnection(host, int(port), timeout=60)
        stream.request("GET", "/v1/sessions/hook-7/events", headers={"Authorization": f"Bearer {TOKEN}"})
        events = stream.getresponse()
        head = b""
        while b"event: session" not in head:  # subscribed: past its first records
            head += events.read1(4096)
        proc.send_signal(signum)
        rest = events.read()  # http.client raises IncompleteRead for a chunked body left unended
        stream.close()
        assert b"Traceback" not in rest
        assert proc.wait(timeout=60) == 0
        assert proc.stderr is not None
        errors = proc.stderr.read()
    assert "live-steering serve: stopped" in errors
    assert "Traceback" not in errors
    # only the command's own lines: neither server adds its start-up banner (hypercorn's INFO)
    assert all(line.startswith("live-steering serve: ") for line in errors.splitlines()), errors


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_serve_answers_a_body_still_arriving_at_sigterm(tmp_path: Path, backend: str) -> None:
    """A POST whose body is still arriving when SIGTERM comes (to the API and to the hook route)
    is answered 503 within the server's graceful wait, as JSON on the API, with nothing
    submitted; the server prints no traceback (uvicorn answered 500 and logged one)."""
    store = make_fleet_store(tmp_path / "fleet.db")
    hooks = str(tmp_path / "hooks.db")
    instruct("hook-7", "Use X", id="cmd-1", store=hooks)
    command = [*SERVE, "--store", store, "--hooks-store", hooks, "--port", "0", "--backend", backend]
    with (
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc,
        stopped(proc),
    ):
        url = listening(proc)
        host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
        uploads = []
        for path in ("/v1/sessions/hook-7/inputs", "/v1/hooks/claude-code"):
            upload = socket.create_connection((host, int(port)), timeout=60)
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                'Content-Length: 100\r\n\r\n{"kind": '
            )
            upload.sendall(head.encode("ascii"))  # the rest of the body never comes
            uploads.append(upload)
        with urllib.request.urlopen(url + "v1/sessions", timeout=60) as answer:  # the uploads are read
            assert answer.status == 200
        proc.send_signal(signal.SIGTERM)
        answers = []
        for upload in uploads:
            with upload, upload.makefile("rb") as reply:
                status = reply.readline().split()[1]
                answers.append((status, reply.read()))
        assert proc.wait(timeout=60) == 0
        assert proc.stderr is not None
        errors = proc.stderr.read()
    (api_status, api_body), (hook_status, _) = answers
    assert (api_status, hook_status) == (b"503", b"503")
    assert b"shutting down" in api_body
    assert b'"error"' in api_body  # the API's JSON error shape, not a server's plain 500
    assert "Traceback" not in errors
    assert all(line.startswith("live-steering serve: ") for line in errors.splitlines()), errors


BURST = 300


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_serve_queues_a_burst_of_connections(tmp_path: Path, backend: str) -> None:
    """300 connections made while the server cannot accept (stopped) all wait in the kernel's
    queue and are answered once it runs: both servers listen with a backlog of 2048 (hypercorn's
    own default, 100, dropped the rest; under a real burst some clients saw a reset)."""
    command = [*SERVE, "--hooks-store", str(tmp_path / "hooks.db"), "--port", "0", "--backend", backend]
    connections: list[socket.socket] = []
    with (
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc,
        stopped(proc),
    ):
        url = listening(proc)
        host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
        with urllib.request.urlopen(url, timeout=60) as page:  # serving: the server has listened again
            assert page.status == 200
        proc.send_signal(signal.SIGSTOP)
        try:
            for _ in range(BURST):
                # the kernel completes the handshake for a stopped server while its queue has room
                connections.append(socket.create_connection((host, int(port)), timeout=15))
        finally:
            proc.send_signal(signal.SIGCONT)
        try:
            request = f"GET / HTTP/1.0\r\nHost: {host}:{port}\r\n\r\n".encode("ascii")
            for conn in connections:
                conn.settimeout(60)
                conn.sendall(request)
            for conn in connections:
                assert conn.makefile("rb").readline().split()[1] == b"200"
        finally:
            for conn in connections:
                conn.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    assert len(connections) == BURST


def test_the_hook_and_instruct_paths_never_import_starlette() -> None:
    """Building the CLI's parser (every subcommand but hook) and running `hook` load no server."""
    code = (
        "import sys\n"
        "from live_steering._cli import build_parser\n"
        "build_parser()\n"
        "names = ('starlette', 'uvicorn', 'hypercorn', 'live_steering.http')\n"
        "bad = sorted(m for m in names if m in sys.modules)\n"
        "print(bad)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
