"""Runner child processes for the chain tests (worker_main.py), killed when a test ends."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

WORKER = Path(__file__).with_name("worker_main.py")
REPO = Path(__file__).resolve().parents[3]


class Workers:
    """Start ``worker_main.py`` processes; every one still alive is killed on exit."""

    def __init__(
        self, log_dir: Path, common: list[str], private_key: str, script: Path = WORKER
    ) -> None:
        self.log_dir = log_dir
        self.script = script
        self.common = common
        self.env = {**os.environ, "SWF_ETH_PRIVATE_KEY": private_key}
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def __enter__(self) -> Workers:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc, _ in self.procs:
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()

    def spawn(
        self, worker_id: str, *extra: str, ready_timeout: float = 30.0
    ) -> subprocess.Popen[bytes]:
        """Start a runner; return once it has opened its store."""
        log = self.log_dir / f"{worker_id}-{len(self.procs)}.log"
        cmd = [sys.executable, str(self.script), *self.common, "--worker-id", worker_id, *extra]
        with log.open("wb") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=REPO, env=self.env)
        self.procs.append((proc, log))
        assert proc.stdout is not None
        deadline = time.monotonic() + ready_timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                raise AssertionError(f"{worker_id} did not start:\n{self.tail(proc)}")
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.2))
            if ready:
                line += os.read(proc.stdout.fileno(), 4096)
        assert line.startswith(b"READY"), line
        return proc

    def tail(self, proc: subprocess.Popen[bytes], lines: int = 40) -> str:
        for p, path in self.procs:
            if p is proc:
                return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
        """SIGTERM and wait: a runner stops gracefully."""
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no graceful stop:\n{self.tail(proc)}") from None
