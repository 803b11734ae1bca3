"""Condition expressions: parsed and checked once, when a definition is loaded.

A ``condition`` branch's ``when`` is a Python expression over the name ``ctx`` (the
instance's context) and a few safe functions, evaluated by simpleeval -- never by
``eval``. :func:`compile_expression` parses it once (under a lock: CPython 3.11's parser
is not safe to call from several threads at once) and checks what can be checked
without data: the syntax, that every name is ``ctx``, a known function or a
comprehension's own variable, and that it holds no ``{{...}}`` template (a condition
reads ``ctx`` directly). :func:`evaluate` runs the parsed form; runner threads never
parse.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable, Mapping
from typing import Any

from simpleeval import DEFAULT_FUNCTIONS, EvalWithCompoundTypes, InvalidExpression

SAFE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "len": len,
    "min": min,
    "max": max,
    "sum": sum,
    "abs": abs,
    "round": round,
    "any": any,
    "all": all,
    "sorted": sorted,
}
"""Functions a condition expression may call beside simpleeval's defaults."""

FUNCTIONS: dict[str, Callable[..., Any]] = {
    **DEFAULT_FUNCTIONS,
    **SAFE_FUNCTIONS,
    # EvalWithCompoundTypes adds these itself; listed so the name check knows them.
    "list": list,
    "tuple": tuple,
    "dict": dict,
    "set": set,
}

NAMES = frozenset({"ctx", "True", "False", "None", *FUNCTIONS})
"""Every name an expression may use (besides its comprehensions' variables)."""

EXPRESSION_ERRORS: tuple[type[Exception], ...] = (
    InvalidExpression,
    ArithmeticError,
    LookupError,
    AttributeError,
    TypeError,
    ValueError,
    NameError,
)
"""What an expression raises on the data it is given (the expression's own fault, not
the runtime's): a missing key, a division by zero, comparing a number with None."""

_parse_lock = threading.Lock()


class ExpressionProblem(ValueError):
    """An expression that cannot run: its message says why (a ``DefinitionError`` line)."""


def compile_expression(text: str) -> ast.expr:
    """Parse and check ``text``; the parsed form for :func:`evaluate`.

    Raises:
        ExpressionProblem: a template, a syntax error, or an unknown name or function.
    """
    if "{{" in text or "}}" in text:
        raise ExpressionProblem(
            f"bad expression {text!r}: templates are not used in a condition: write the "
            "path as a plain name, "
            "e.g. ctx.input.amount > 100 instead of {{ctx.input.amount}} > 100"
        )
    with _parse_lock:
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ExpressionProblem(f"bad expression {text!r}: {exc.msg}") from None
        # Walking the tree touches no parser state, but keep every AST operation in one
        # place: the tree is read-only from here on.
        unknown = _unknown_names(tree.body)
    if unknown:
        raise ExpressionProblem(
            f"bad expression {text!r}: unknown name(s) {sorted(unknown)}: an expression "
            "sees ctx (ctx.input, "
            f"ctx.<node output>) and the functions {sorted(SAFE_FUNCTIONS)}"
        )
    return tree.body


def _unknown_names(root: ast.expr) -> set[str]:
    bound: set[str] = set()
    for node in ast.walk(root):
        if isinstance(node, ast.comprehension):
            for target in ast.walk(node.target):
                if isinstance(target, ast.Name):
                    bound.add(target.id)
    return {
        node.id
        for node in ast.walk(root)
        if isinstance(node, ast.Name) and node.id not in NAMES and node.id not in bound
    }


def evaluate(parsed: ast.expr, text: str, ctx: Mapping[str, Any]) -> Any:
    """The value of the parsed expression ``parsed`` (``text`` is its source, for errors)
    with ``ctx`` bound to the name ``ctx``. A fresh evaluator per call: nothing shared."""
    evaluator = EvalWithCompoundTypes(names={"ctx": ctx}, functions=dict(FUNCTIONS))
    return evaluator.eval(text, previously_parsed=parsed)
