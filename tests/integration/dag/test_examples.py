"""The DAG example and the README's DAG code run as a user would run them."""

from __future__ import annotations

import os
import re
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


def test_readme_dag_block_runs_as_written(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text().split("## DAG workflows", 1)[1]
    match = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert match, "no python block in the README's DAG section"
    script = tmp_path / "readme_dag.py"
    script.write_text(match.group(1))
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = "COMPLETED {'order': {'id': 7, 'qty': 3}, 'ship': {'tracking': 'T-7'}}"
    assert expected in proc.stdout
    assert f"# {expected}" in match.group(1)  # the comment in the README says what it prints
