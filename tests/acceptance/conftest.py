"""Run the installed ``statemachine-wf`` command as a user of the project's venv would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's bin: ". .venv/bin/activate" puts it first


@pytest.fixture
def user_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a user who activated the venv, with a fresh SQLite store.

    ``statemachine_wf`` is importable from a directory that holds nothing else, so the
    repository's own modules (``examples``) are found only the way a user's are: from the
    current directory. No ``SWF_*`` setting leaks in from the test run.
    """
    only_sdk = tmp_path / "sdk"
    only_sdk.mkdir()
    (only_sdk / "statemachine_wf").symlink_to(ROOT / "statemachine_wf")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWF_")}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(only_sdk),
        SWF_DATABASE_URL=f"sqlite:///{tmp_path / 'workflows.db'}",
        SWF_BANK_PATH=str(tmp_path / "bank.db"),
    )
    return env


Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(user_env: dict[str, str]) -> Cli:
    """``cli(*args, cwd=ROOT, ok=True)`` runs ``statemachine-wf`` with ``user_env``."""

    def run(*args: str, cwd: Path = ROOT, ok: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(BIN / "statemachine-wf"), *args],
            cwd=cwd,
            env=user_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if ok:
            assert proc.returncode == 0, f"{args}: {proc.stdout}{proc.stderr}"
        return proc

    return run
