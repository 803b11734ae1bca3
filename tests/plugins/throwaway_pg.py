"""A PostgreSQL cluster the test creates, owns, restarts and removes.

Tests that stop the database cannot use the shared server at ``SWF_TEST_PG_DSN``. This
fixture runs ``initdb`` into a temporary directory and ``pg_ctl`` on a free port of
127.0.0.1 (trust auth; fsync off, since the tests kill processes, not the machine, and
the OS page cache keeps what a commit wrote; synchronous_commit stays on, or a crash
would lose commits already acknowledged).
``initdb`` refuses to run as root; as root the cluster belongs to the ``postgres`` OS
user and the commands run through ``runuser``. The postmaster is stopped by its PID at
teardown whatever happened.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not candidates:
        raise RuntimeError(f"{name} not found on PATH or under /usr/lib/postgresql/*/bin")
    return candidates[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    """One throwaway cluster: its data directory, port and DSN."""

    data: Path
    port: int
    log: Path

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 60.0) -> None:
        cmd = list(args)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=timeout)

    def start(self) -> None:
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data} "
            "-c fsync=off -c full_page_writes=off"
        )
        self._run(
            _bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        """``fast`` closes sessions and checkpoints; ``immediate`` is a crash."""
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def pid(self) -> int | None:
        pidfile = self.data / "postmaster.pid"
        try:
            return int(pidfile.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        pid = self.pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


@pytest.fixture
def throwaway_pg() -> Iterator[Cluster]:
    """A fresh cluster, started; stopped by PID and deleted at teardown."""
    root = Path(tempfile.mkdtemp(prefix="swf-pg-"))
    data = root / "data"
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(data, "postgres")
    os.chmod(data, 0o700)
    cluster = Cluster(data=data, port=_free_port(), log=root / "postgres.log")
    cluster._run(
        _bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.kill()
        shutil.rmtree(root, ignore_errors=True)
