"""Start and drive a local arlocal (Arweave gateway emulator) bound to 127.0.0.1.

arlocal comes from ``node_modules`` (``npm install`` in the repository). Its CLI
listens on every interface, writes ``./logs`` in its working directory and keeps
its database under ``~/.arlocal``; :func:`start_arlocal` runs it through
``arlocal_server.js`` instead, on loopback only, with its own temporary working
directory, database and ``HOME``, and learns the port from the process itself.

Example::

    with start_arlocal() as node:
        node.mint(wallet.address, 10**12)
        ...
        node.mine()
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

from statemachine_wf.adapters.arweave.errors import GatewayUnavailable

__all__ = ["ArLocalNode", "find_node_modules", "start_arlocal"]

_SERVER_SCRIPT = Path(__file__).with_name("arlocal_server.js")
NODE_MODULES_ENV_VAR = "SWF_NODE_MODULES"


def find_node_modules() -> Path:
    """Find the ``node_modules`` directory that holds arlocal.

    Looks at ``$SWF_NODE_MODULES``, then upwards from the current directory and
    from this file (the repository root has one).

    Raises:
        GatewayUnavailable: arlocal is not installed anywhere we look.
    """
    candidates: list[Path] = []
    env = os.environ.get(NODE_MODULES_ENV_VAR)
    if env:
        candidates.append(Path(env))
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        candidates.extend(p / "node_modules" for p in (start, *start.parents))
    for candidate in candidates:
        if (candidate / "arlocal" / "package.json").is_file():
            return candidate
    raise GatewayUnavailable(
        "arlocal is not installed: run `npm install` in the repository "
        f"or set {NODE_MODULES_ENV_VAR}"
    )


class ArLocalNode:
    """A running arlocal process; :meth:`stop` kills it by PID and removes its files.

    Attributes:
        url: the gateway URL, ``http://127.0.0.1:<port>``.
        port: the TCP port on 127.0.0.1.
        pid: the node process id.
        workdir: the temporary directory holding its cwd, HOME, database and logs.
    """

    def __init__(self, process: subprocess.Popen[bytes], port: int, workdir: Path) -> None:
        self._process = process
        self.port = port
        self.pid = process.pid
        self.url = f"http://127.0.0.1:{port}"
        self.workdir = workdir
        self._http = httpx.Client(base_url=self.url, timeout=10.0)

    def __repr__(self) -> str:
        return f"ArLocalNode(url={self.url!r}, pid={self.pid})"

    @property
    def running(self) -> bool:
        """Whether the process is still alive."""
        return self._process.poll() is None

    def mint(self, address: str, winston: int) -> int:
        """Add ``winston`` to ``address``'s balance; return the new balance."""
        resp = self._http.get(f"/mint/{address}/{int(winston)}")
        resp.raise_for_status()
        return int(resp.text)

    def mine(self, n: int = 1) -> None:
        """Mine ``n`` blocks (pending transactions go into the first)."""
        resp = self._http.get(f"/mine/{int(n)}")
        resp.raise_for_status()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL), wait for it, delete its files.

        Idempotent.
        """
        self._http.close()
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self._process.wait(timeout)
        shutil.rmtree(self.workdir, ignore_errors=True)
        atexit.unregister(self.stop)

    def __enter__(self) -> ArLocalNode:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_arlocal(
    port: int | None = None,
    *,
    node_modules: str | os.PathLike[str] | None = None,
    startup_timeout: float = 30.0,
) -> ArLocalNode:
    """Start arlocal on 127.0.0.1 and wait until ``GET /info`` answers.

    Args:
        port: the port to listen on; a free one chosen by the OS by default.
        node_modules: where arlocal is installed; see :func:`find_node_modules`.
        startup_timeout: seconds to wait for it to be ready.

    Returns:
        The running node. Stop it with :meth:`ArLocalNode.stop` (also done at
        interpreter exit if forgotten).

    Raises:
        GatewayUnavailable: node or arlocal is missing, or it did not start in time.
    """
    node = shutil.which("node")
    if node is None:
        raise GatewayUnavailable("node is not on PATH; arlocal needs Node.js")
    modules = Path(node_modules) if node_modules is not None else find_node_modules()
    workdir = Path(tempfile.mkdtemp(prefix="swf-arlocal-"))
    (workdir / "home").mkdir()
    env = {
        **os.environ,
        "HOME": str(workdir / "home"),
        "ARLOCAL_NODE_MODULES": str(modules),
    }
    stdout_path, stderr_path = workdir / "stdout.log", workdir / "stderr.log"
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        process = subprocess.Popen(
            [node, str(_SERVER_SCRIPT), str(port or 0), str(workdir / "db")],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
    handle: ArLocalNode | None = None
    try:
        actual = _wait_for_port(
            process, stdout_path, stderr_path, time.monotonic() + startup_timeout
        )
        handle = ArLocalNode(process, actual, workdir)
        _wait_ready(handle, stderr_path, time.monotonic() + startup_timeout)
    except BaseException:
        if handle is not None:
            handle.stop()
        else:
            process.kill()
            process.wait()
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    # A forgotten node would outlive the interpreter (it is its own process).
    atexit.register(handle.stop)
    return handle


def _wait_for_port(
    process: subprocess.Popen[bytes], stdout_path: Path, stderr_path: Path, deadline: float
) -> int:
    # The server prints {"port": N, "pid": P} once listening; reading it back
    # (rather than picking a free port here) leaves no window for another process
    # to take the port first.
    while time.monotonic() < deadline:
        for line in stdout_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    return int(json.loads(line)["port"])
        if process.poll() is not None:
            raise GatewayUnavailable(
                f"arlocal exited with code {process.returncode}: {_tail(stderr_path)}"
            )
        time.sleep(0.05)
    raise GatewayUnavailable(f"arlocal did not report its port in time: {_tail(stderr_path)}")


def _wait_ready(handle: ArLocalNode, stderr_path: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if handle._http.get("/info", timeout=1.0).status_code == 200:
                return
        if not handle.running:
            raise GatewayUnavailable(f"arlocal exited during startup: {_tail(stderr_path)}")
        time.sleep(0.05)
    raise GatewayUnavailable(f"arlocal did not answer GET /info in time: {_tail(stderr_path)}")


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:].strip() or "(no output)"
    except OSError:
        return "(no output)"
