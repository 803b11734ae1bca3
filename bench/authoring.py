"""``python -m bench authoring [FILE ...]``: lines of workflow code, counted the same way each time.

What counts: every line of a module that holds code, except blank lines, comment-only
lines, import statements, docstrings (any bare string statement: module, class, function
and attribute docstrings) and the ``__all__`` list. Input and progress models count; they
are workflow code an author writes.

Printed per top-level definition, then per workflow class: the class itself plus the
input and progress models it names in ``Workflow[Input, Progress]`` when they are defined
in the same file (a model shared by several workflows counts for each), then the file's
total. The default file is the ChaosChain example (issue 11: at most 150 lines for the
three workflows, at most 50 for WorkSubmission).
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Count", "count_file", "main"]

DEFAULT = Path(__file__).resolve().parent.parent / "examples" / "chaoschain" / "workflows.py"


@dataclass(frozen=True)
class Count:
    """The counted lines of one file."""

    path: Path
    total: int
    definitions: dict[str, int]
    workflows: dict[str, tuple[int, tuple[str, ...]]]
    """Workflow class -> (its lines with its models', the models counted)."""


def _code_lines(source: str, tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    for node in ast.walk(tree):
        skip = isinstance(node, ast.Import | ast.ImportFrom) or (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        )
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            skip = True
        if skip and isinstance(node, ast.stmt) and node.end_lineno is not None:
            lines.difference_update(range(node.lineno, node.end_lineno + 1))
    return lines


def _name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def _models(node: ast.ClassDef) -> tuple[str, ...]:
    """The names in ``Base[Input, Progress]`` among the class's bases."""
    for base in node.bases:
        if isinstance(base, ast.Subscript) and isinstance(base.slice, ast.Tuple):
            names = [e.id for e in base.slice.elts if isinstance(e, ast.Name)]
            if len(names) == 2:
                return tuple(names)
    return ()


def _is_workflow(node: ast.ClassDef) -> bool:
    abstract = any(
        isinstance(s, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__abstract__" for t in s.targets)
        for s in node.body
    )
    typed = any(
        isinstance(s, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "workflow_type" for t in s.targets)
        for s in node.body
    )
    return typed and not abstract


def count_file(path: Path) -> Count:
    """Count ``path`` (see the module docstring for the rule)."""
    source = path.read_text()
    tree = ast.parse(source)
    code = _code_lines(source, tree)
    definitions: dict[str, int] = {}
    classes: dict[str, ast.ClassDef] = {}
    for node in tree.body:
        name = _name(node)
        if name is None or node.end_lineno is None:
            continue
        n = len(code & set(range(node.lineno, node.end_lineno + 1)))
        decorators = getattr(node, "decorator_list", [])
        if decorators:
            n += len(code & set(range(decorators[0].lineno, node.lineno)))
        if n:
            definitions[name] = definitions.get(name, 0) + n
        if isinstance(node, ast.ClassDef):
            classes[name] = node
    workflows: dict[str, tuple[int, tuple[str, ...]]] = {}
    for name, node in classes.items():
        if not _is_workflow(node):
            continue
        models = tuple(m for m in _models(node) if m in definitions)
        workflows[name] = (definitions[name] + sum(definitions[m] for m in models), models)
    return Count(path, len(code), definitions, workflows)


def report(count: Count) -> str:
    """The counts as text."""
    out = [f"{count.path}: {count.total} lines of workflow code", "", "per definition:"]
    out += [f"  {n:>4}  {name}" for name, n in count.definitions.items()]
    out += ["", "per workflow (the class + its input/progress models from this file):"]
    for name, (n, models) in count.workflows.items():
        out.append(f"  {n:>4}  {name}" + (f"  (with {', '.join(models)})" if models else ""))
    owned = set(count.workflows).union(*(m for _, m in count.workflows.values()))
    shared = {k: v for k, v in count.definitions.items() if k not in owned}
    if count.workflows and shared:
        out.append(f"  {sum(shared.values()):>4}  shared by them: {', '.join(shared)}")
    return "\n".join(out)


def main(paths: list[str] | None = None) -> int:
    """Print the counts of each file (default: the ChaosChain example)."""
    for i, raw in enumerate(paths or [str(DEFAULT)]):
        if i:
            print()
        print(report(count_file(Path(raw))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
