"""The DAG example runs as a user would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_dag_orders_example() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "examples.dag_orders"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "saved 'orders' version 1" in out
    assert out.count("COMPLETED") == 3
    assert "order 7: total 320, in stock True, held for review" in out
    assert "{'ok': True, 'total': 320}" in out
    assert "'sum_small'" not in out.split("node runs:")[1]
