"""The DAG example and the README's DAG code run as a user would run them."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.acceptance.test_readme_and_examples import ROOT, readme_block, run


def test_dag_orders_example() -> None:
    out = run([sys.executable, "-m", "examples.dag_orders"], cwd=ROOT).stdout
    assert "saved 'orders' version 1" in out
    assert out.count("COMPLETED") == 3
    assert "order 7: total 320, in stock True, held for review" in out
    assert "{'ok': True, 'total': 320}" in out
    assert "'sum_small'" not in out.split("node runs:")[1]


def test_readme_dag_block_runs_as_written(tmp_path: Path) -> None:
    block = readme_block("DAG workflows")
    script = tmp_path / "readme_dag.py"
    script.write_text(block)
    out = run([sys.executable, str(script)], cwd=tmp_path).stdout
    expected = "COMPLETED {'order': {'id': 7, 'qty': 3}, 'ship': {'tracking': 'T-7'}}"
    assert expected in out
    assert f"# {expected}" in block  # the comment in the README says what it prints


def test_dag_loop_example() -> None:
    """A loop body's side effect keyed per iteration; ``attempt`` counts over iterations."""
    out = run([sys.executable, "-m", "examples.dag_loop"], cwd=ROOT).stdout
    lines = [line for line in out.splitlines() if line.startswith("iteration")]
    keys = [line.split("key ")[1] for line in lines]
    assert [line.split(":")[0] for line in lines] == [
        "iteration 0",
        "iteration 1",
        "iteration 1",  # the retry after the dropped answer
        "iteration 2",
    ]
    assert [k.rsplit("/", 1)[1] for k in keys] == ["1", "2", "2", "3"]  # one run each
    assert [line.split("try ")[1].split(",")[0] for line in lines] == ["1", "2", "3", "4"]
    assert "COMPLETED {'n': 3, 'receipts': ['charge-1:10', 'charge-2:20', 'charge-3:30']}" in out
    assert "charges made: 3" in out
