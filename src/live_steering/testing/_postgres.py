"""A throwaway PostgreSQL cluster for tests and benchmarks: ``initdb``, ``postgres`` on a Unix socket.

``PostgresCluster.start()`` finds the server binaries under ``/usr/lib/postgresql/*/bin``
(not ``PATH``), runs ``initdb`` into a fresh temporary directory and starts ``postgres``
listening on a Unix socket in it only (``listen_addresses=''``: no TCP port). PostgreSQL
refuses to run as root, so as root both run as the ``postgres`` system user, in a directory
chowned to it. ``stop()`` stops the server by its pid (SIGINT, fast shutdown) and removes
the directory. Testing aid only; never for data anyone keeps.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

import attrs

__all__ = ["PostgresCluster", "find_binaries"]


def find_binaries() -> str | None:
    """The newest ``/usr/lib/postgresql/N/bin`` holding ``initdb`` and ``postgres``, or ``None``."""
    found = [
        path
        for path in glob.glob("/usr/lib/postgresql/*/bin")
        if os.path.exists(os.path.join(path, "initdb")) and os.path.exists(os.path.join(path, "postgres"))
    ]

    def version(path: str) -> tuple[int, ...]:
        number = path.split("/")[-2]
        return tuple(int(part) for part in number.split(".") if part.isdigit())

    return max(found, key=version) if found else None


@attrs.define
class PostgresCluster:
    """A running throwaway cluster; ``dsn`` connects as ``postgres`` over its Unix socket."""

    directory: str
    process: subprocess.Popen[bytes]
    dsn: str

    @classmethod
    def start(cls, *, timeout: float = 30.0) -> PostgresCluster:
        """Create and start a cluster; ``RuntimeError`` if PostgreSQL is missing or fails."""
        bin_dir = find_binaries()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)")
        directory = tempfile.mkdtemp(prefix="ls-pg-")
        run_as: dict[str, Any] = {}
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(directory, user.pw_uid, user.pw_gid)
            run_as = {"user": "postgres"}
        data = os.path.join(directory, "data")
        try:
            subprocess.run(
                [
                    os.path.join(bin_dir, "initdb"),
                    "-D",
                    data,
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                ],
                check=True,
                capture_output=True,
                cwd=directory,
                **run_as,
            )
            process = subprocess.Popen(
                [
                    os.path.join(bin_dir, "postgres"),
                    "-D",
                    data,
                    "-k",
                    directory,
                    "-c",
                    "listen_addresses=",
                    "-c",
                    "fsync=on",
                    "-c",
                    "max_connections=200",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=directory,
                **run_as,
            )
        except (OSError, subprocess.CalledProcessError) as exc:
            shutil.rmtree(directory, ignore_errors=True)
            said = getattr(exc, "stderr", None)
            detail = f" ({said.decode(errors='replace').strip()})" if said else ""
            raise RuntimeError(f"could not start PostgreSQL: {exc}{detail}") from exc
        cluster = cls(directory, process, f"host={directory} user=postgres dbname=postgres")
        deadline = time.monotonic() + timeout
        ready = [os.path.join(bin_dir, "pg_isready"), "-q", "-h", directory, "-U", "postgres"]
        while subprocess.run(ready, check=False).returncode != 0:  # accepting connections
            if process.poll() is not None or time.monotonic() > deadline:
                cluster.stop()
                raise RuntimeError("PostgreSQL did not start")
            time.sleep(0.01)
        return cluster

    def stop(self) -> None:
        """Stop the server by its pid and remove its directory."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
