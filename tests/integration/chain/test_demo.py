"""The README's main command, killed mid-way and resumed (it starts and stops its nodes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.chain, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_demo_killed_then_resumed(tmp_path: Path) -> None:
    import json

    workdir = tmp_path / "run"
    cmd = [sys.executable, "-m", "examples.chaoschain", "--block-time", "0.5"]
    killed = subprocess.run(
        [*cmd, "--dir", str(workdir), "--kill-after", "3"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    run = json.loads((workdir / "run.json").read_text())
    pids = [run["anvil"]["pid"], run["arlocal"]["pid"]]
    assert all(alive(p) for p in pids)  # the outside world outlives the worker
    resumed = subprocess.run(
        [*cmd, "--resume", str(workdir)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    out = resumed.stdout
    assert resumed.returncode == 0, out + resumed.stderr
    assert "all workflows COMPLETED: True" in out
    assert "one submitWork per data hash: True" in out
    assert "epoch 1 closed: True" in out
    assert "reconciled:" in out  # the start-up pass looked at what was in flight
    assert not any(alive(p) for p in pids)  # stopped by PID
    from statemachine_wf.adapters.ethereum.devnode import ANVIL_DEV_PRIVATE_KEYS

    db = (workdir / "workflows.db").read_bytes().lower()
    for key in ANVIL_DEV_PRIVATE_KEYS:  # no private key in anything printed or stored
        assert key[2:] not in out + resumed.stderr + killed.stdout + killed.stderr
        assert key[2:].encode() not in db
