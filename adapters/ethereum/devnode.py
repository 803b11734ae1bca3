"""Start and stop a local anvil dev node (the binary the npm package ships).

Used by the integration-test fixtures and by the examples' main command, so it has no
pytest or web3 dependency: readiness is checked with a plain JSON-RPC POST.

Example::

    with start_anvil() as node:
        client = EthereumClient.from_url(node.url)
        signer = LocalSigner.from_private_key(node.private_keys[0])
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from statemachine_wf.errors import WorkflowError

__all__ = [
    "ANVIL_CHAIN_ID",
    "ANVIL_DEV_ADDRESSES",
    "ANVIL_DEV_PRIVATE_KEYS",
    "ANVIL_RELATIVE_PATH",
    "AnvilNode",
    "DevNodeError",
    "find_anvil",
    "free_port",
    "start_anvil",
]

ANVIL_RELATIVE_PATH = Path("node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil")
ANVIL_CHAIN_ID = 31337

# anvil's default accounts, derived from the public test mnemonic
# "test test test test test test test test test test test junk" (m/44'/60'/0'/0/i).
# They are published dev keys holding 10,000 ETH on every fresh anvil: never use them
# on a real network. A test pins them against `eth_accounts`.
ANVIL_DEV_PRIVATE_KEYS: tuple[str, ...] = (
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
)
ANVIL_DEV_ADDRESSES: tuple[str, ...] = (
    "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
    "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
    "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65",
    "0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc",
    "0x976EA74026E726554dB657fA54763abd0C3a0aa9",
    "0x14dC79964da2C08b23698B3D3cc7Ca32193d9955",
    "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
    "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
)


class DevNodeError(WorkflowError):
    """The local dev node could not be found or started."""


def find_anvil(start: str | os.PathLike[str] | None = None) -> Path:
    """Find the anvil binary in the nearest ``node_modules`` at or above ``start``.

    Args:
        start: The directory to search from; the current directory if None.

    Returns:
        The absolute path of the executable.

    Raises:
        DevNodeError: No ancestor holds ``node_modules/@foundry-rs/anvil-linux-amd64``
            (run ``npm install`` in the repository).
    """
    origin = Path(start if start is not None else Path.cwd()).resolve()
    for directory in (origin, *origin.parents):
        candidate = directory / ANVIL_RELATIVE_PATH
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise DevNodeError(
        f"anvil not found in any node_modules at or above {origin} "
        f"(expected {ANVIL_RELATIVE_PATH}); run `npm install` in the repository"
    )


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class AnvilNode:
    """A running anvil process; stop it with :meth:`stop` or a ``with`` block.

    Attributes:
        url: The HTTP JSON-RPC endpoint, ``http://127.0.0.1:<port>``.
        pid: The process id (the node is one process: stop kills exactly this pid).
        port: The loopback port it listens on.
        chain_id: The chain id it was started with.
        private_keys: The funded dev accounts' keys (public test keys, see module).
        addresses: Their checksummed addresses, same order.
    """

    url: str
    pid: int
    port: int
    chain_id: int
    private_keys: tuple[str, ...] = ANVIL_DEV_PRIVATE_KEYS
    addresses: tuple[str, ...] = ANVIL_DEV_ADDRESSES
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        # The keys are public dev keys, but reprs end up in logs: keep them out anyway.
        return f"AnvilNode(url={self.url!r}, pid={self.pid}, chain_id={self.chain_id})"

    @property
    def running(self) -> bool:
        """Whether the process is still alive."""
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the process by pid and wait for it; idempotent.

        Sends SIGTERM, then SIGKILL if it has not exited after ``timeout`` seconds.
        """
        process = self._process
        if process is None or process.poll() is not None:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            process.wait(timeout=timeout)
        except ProcessLookupError:  # exited between poll() and kill()
            process.wait(timeout=timeout)

    def __enter__(self) -> AnvilNode:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _rpc_answers(url: str, timeout: float) -> bool:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []})
    request = urllib.request.Request(
        url, data=body.encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return "result" in json.loads(response.read())
    except (OSError, ValueError):  # refused / reset / not yet JSON: not ready
        return False


def _read_tail(stream: IO[bytes]) -> str:
    stream.seek(0)
    return stream.read()[-2000:].decode(errors="replace").strip()


def start_anvil(
    *,
    block_time: float | None = None,
    chain_id: int = ANVIL_CHAIN_ID,
    port: int | None = None,
    binary: str | os.PathLike[str] | None = None,
    search_from: str | os.PathLike[str] | None = None,
    extra_args: tuple[str, ...] = (),
    ready_timeout: float = 10.0,
) -> AnvilNode:
    """Start anvil on a loopback port and wait until its RPC answers.

    Args:
        block_time: Seconds between blocks; None means automine (a block per tx).
        chain_id: The chain id; fixed so signed transactions are reproducible.
        port: The port; a free one if None (retried if another process takes it first).
        binary: The anvil executable; found with :func:`find_anvil` if None.
        search_from: Where :func:`find_anvil` starts looking (default: cwd).
        extra_args: More anvil flags, e.g. ``("--hardfork", "cancun")``.
        ready_timeout: Seconds to wait for the RPC to answer.

    Returns:
        The running node's handle.

    Raises:
        DevNodeError: The binary is missing, exited early, or never answered.
    """
    executable = Path(binary) if binary is not None else find_anvil(search_from)
    attempts = 1 if port is not None else 3
    last_error = "anvil did not start"
    for _ in range(attempts):
        chosen = port if port is not None else free_port()
        args = [
            str(executable),
            "--host",
            "127.0.0.1",
            "--port",
            str(chosen),
            "--chain-id",
            str(chain_id),
            "--silent",
        ]
        if block_time is not None:
            args += ["--block-time", str(block_time)]
        args += list(extra_args)
        # stderr goes to a temp file, not a pipe nobody reads (a full pipe would block anvil).
        with tempfile.TemporaryFile() as stderr:
            process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
            )
            url = f"http://127.0.0.1:{chosen}"
            deadline = time.monotonic() + ready_timeout
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    last_error = f"anvil exited with {process.returncode}: {_read_tail(stderr)}"
                    break
                if _rpc_answers(url, timeout=0.5):
                    return AnvilNode(
                        url=url, pid=process.pid, port=chosen, chain_id=chain_id, _process=process
                    )
                time.sleep(0.02)
            else:
                process.kill()
                process.wait()
                last_error = f"anvil did not answer on {url} within {ready_timeout}s"
    raise DevNodeError(last_error)
