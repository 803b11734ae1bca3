"""``python -m examples.token_payout`` runs as the README says, and prints no key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from statemachine_wf.adapters.ethereum.devnode import ANVIL_DEV_PRIVATE_KEYS

pytestmark = [pytest.mark.chain, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]


def test_demo_pays_each_recipient_once(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "examples.token_payout", "--dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"{out}\n{proc.stderr}"
    assert "each recipient paid exactly once, one in flight, all COMPLETED: True" in out
    assert "same instance: True" in out
    assert "payout-6  COMPLETED  found paid on chain" in out
    assert "treasury transactions pending at once, at most: 1" in out
    assert out.count("Paid events 1 ") == 6
    for key in ANVIL_DEV_PRIVATE_KEYS:
        assert key[2:].lower() not in (out + proc.stderr).lower()
        assert key[2:].encode() not in (tmp_path / "workflows.db").read_bytes()
