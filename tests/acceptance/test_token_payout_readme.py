"""The README's "second contract" block is the example's class, with the count it claims."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from bench.authoring import count_file

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
WORKFLOWS = ROOT / "examples" / "token_payout" / "workflows.py"


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                node.body = body[1:]  # the docstring
            return node
    raise AssertionError(f"no class {name}")


def test_the_readme_block_is_the_example_class_as_written() -> None:
    block = re.search(r"```python\n(class TokenPayout\(.*?)```", README, re.DOTALL)
    assert block is not None
    shown = _class(ast.parse(block.group(1)), "TokenPayout")
    real = _class(ast.parse(WORKFLOWS.read_text()), "TokenPayout")
    assert ast.dump(shown) == ast.dump(real)


def test_the_readme_states_the_count_bench_authoring_prints() -> None:
    count = count_file(WORKFLOWS)
    assert f"**A second contract in {count.total} lines.**" in README
    assert f"counts {count.total} lines of workflow" in README
    assert f"TokenPayout {count.workflows['TokenPayout'][0]} with its input model" in README
