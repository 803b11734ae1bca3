"""Condition expressions: parsed and checked once, when a definition is loaded.

A ``condition`` branch's ``when`` is a Python expression over the name ``ctx`` (the
instance's context) and a few safe functions, evaluated by simpleeval -- never by
``eval``. :func:`compile_expression` parses it once (under a lock: CPython 3.11's parser
is not safe to call from several threads at once) and checks what can be checked
without data: the syntax, that every name is ``ctx``, a known function or a
comprehension's own variable, that it holds no ``{{...}}`` template (a condition
reads ``ctx`` directly), and that it is small and uses only the allowed constructs:
at most :data:`MAX_EXPRESSION_CHARS` characters, :data:`MAX_EXPRESSION_NODES` syntax
nodes nested at most :data:`MAX_EXPRESSION_DEPTH` deep, no f-string format specs, and
method calls only to the read-only methods in :data:`SAFE_METHODS` (no ``append``, no
``ljust``/``zfill``/``replace``/``join``/``format``). :func:`evaluate` runs the parsed
form; runner threads never parse. On a mapping ``.name`` reads the key ``name`` (a node
output called ``items`` is ``ctx.items``, not ``dict.items``); only a call is a method.

Evaluation is pure and bounded. It sees a private copy of the context, so nothing it
does reaches the runner's cached log. Every step is counted (at most
:data:`MAX_EVAL_STEPS`), operators check their operands' sizes *before* computing (an
integer result over :data:`MAX_INT_BITS` bits, a string or list over
:data:`MAX_BUILT_LENGTH` items, ``%`` formatting of a string), and the strings, lists
and mappings an evaluation builds count against one budget of
:data:`MAX_BUILT_LENGTH` items. Going over any of these raises :class:`ExpressionLimit`;
the condition node then fails with the code ``expression_limit``.
"""

from __future__ import annotations

import ast
import operator
import threading
from collections.abc import Callable, Mapping
from typing import Any

from simpleeval import (
    DEFAULT_OPERATORS,
    DISALLOW_METHODS,
    DISALLOW_PREFIXES,
    AttributeDoesNotExist,
    EvalWithCompoundTypes,
    InvalidExpression,
    IterableTooLong,
    NumberTooHigh,
)

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
"""Functions a condition expression may call (with ``int``, ``float``, ``str``)."""

FUNCTIONS: dict[str, Callable[..., Any]] = {
    # simpleeval's defaults without rand and randint: a condition decides a branch, and
    # the interpreter that evaluates it is pure (no clock, no randomness), so the same
    # log always dispatches the same way.
    "int": int,
    "float": float,
    "str": str,
    **SAFE_FUNCTIONS,
    # EvalWithCompoundTypes adds these itself; listed so the name check knows them.
    "list": list,
    "tuple": tuple,
    "dict": dict,
    "set": set,
}

NAMES = frozenset({"ctx", "True", "False", "None", *FUNCTIONS})
"""Every name an expression may use (besides its comprehensions' variables)."""

SAFE_METHODS = frozenset(
    {
        # str: read-only, the result at most as long as the string
        "lower", "upper", "casefold", "strip", "lstrip", "rstrip", "startswith",
        "endswith", "isdigit", "isalpha", "isalnum", "isdecimal", "isnumeric",
        "isspace", "islower", "isupper", "find", "rfind", "split", "rsplit",
        "removeprefix", "removesuffix",
        # str, list, tuple
        "count", "index",
        # dict
        "get", "keys", "values", "items",
    }
)  # fmt: skip
"""The only methods a condition may call: none mutates, none builds more than it reads
(``ljust``, ``zfill``, ``center``, ``replace``, ``join``, ``format``, ``append`` ... are
refused when the definition is loaded)."""

MAX_EXPRESSION_CHARS = 4000
"""Longest ``when`` text."""
MAX_EXPRESSION_NODES = 500
"""Most syntax-tree nodes in one expression."""
MAX_EXPRESSION_DEPTH = 40
"""Deepest nesting of the syntax tree (``((((x))))``, ``-(-(-x))``, ``a+b+c+...``)."""
MAX_EVAL_STEPS = 100_000
"""Most evaluation steps (tree nodes evaluated, comprehension items included) per
evaluation."""
MAX_INT_BITS = 10_000
"""Largest integer (in bits, about 3,000 digits) ``**``, ``*`` and ``<<`` may produce."""
MAX_BUILT_LENGTH = 1_000_000
"""Most characters/items the strings, lists, tuples, sets and mappings an evaluation
builds may hold together."""

# What a condition may contain, as an allow-list: anything else (a lambda, a walrus
# assignment, await, a syntax form a later Python adds) is refused at load until someone
# decides it is safe. A deny-list would admit each new construct silently.
_ALLOWED_NODES: tuple[type[ast.AST], ...] = (
    ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp,
    ast.Call, ast.keyword, ast.Attribute, ast.Subscript, ast.Slice, ast.Name,
    ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp,
    ast.DictComp, ast.GeneratorExp, ast.comprehension, ast.JoinedStr,
    ast.FormattedValue, ast.Starred, ast.expr_context, ast.boolop, ast.operator,
    ast.unaryop, ast.cmpop,
)  # fmt: skip

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

LIMIT_ERRORS: tuple[type[Exception], ...] = (
    NumberTooHigh,
    IterableTooLong,
    RecursionError,
    MemoryError,
)
"""simpleeval's and Python's own size refusals: reported as :class:`ExpressionLimit`."""

# Conditions are compiled when a definition is loaded, which may happen on several
# threads at once (clients, runners): see the module docstring for why they take turns.
_parse_lock = threading.Lock()


class ExpressionProblem(ValueError):
    """An expression that cannot run: its message says why (a ``DefinitionError`` line)."""


class ExpressionLimit(Exception):
    """An evaluation went over one of the bounds (steps, integer size, built size)."""


def compile_expression(text: str) -> ast.expr:
    """Parse and check ``text``; the parsed form for :func:`evaluate`.

    Raises:
        ExpressionProblem: a template, a syntax error, an unknown name or function, a
            construct or method not allowed, or an expression over a size limit.
    """
    shown = text if len(text) <= 80 else text[:77] + "..."
    # Length first: it bounds the parser's work before anything else runs on the text.
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionProblem(
            f"bad expression {shown!r}: {len(text)} characters; the limit is {MAX_EXPRESSION_CHARS}"
        )
    if "{{" in text or "}}" in text:
        raise ExpressionProblem(
            f"bad expression {shown!r}: templates are not used in a condition: write the "
            "path as a plain name, "
            "e.g. ctx.input.amount > 100 instead of {{ctx.input.amount}} > 100"
        )
    with _parse_lock:
        try:
            # strip(): mode="eval" reads a leading space as an indent (IndentationError),
            # and an editor's text field easily keeps one.
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ExpressionProblem(f"bad expression {shown!r}: {exc.msg}") from None
        except (RecursionError, MemoryError):
            # CPython's parser gives up on deep nesting this way: reported as the nesting
            # limit, a DefinitionError like any other, never a crash of the caller.
            raise ExpressionProblem(
                f"bad expression {shown!r}: nested too deeply to parse (the limit is "
                f"{MAX_EXPRESSION_DEPTH} levels)"
            ) from None
        # Walking the tree touches no parser state, but keep every AST operation in one
        # place: the tree is read-only from here on.
        shape = _shape_problem(tree)
        unknown = set() if shape else _unknown_names(tree.body)
    if shape:
        raise ExpressionProblem(f"bad expression {shown!r}: {shape}")
    if unknown:
        raise ExpressionProblem(
            f"bad expression {shown!r}: unknown name(s) {sorted(unknown)}: an expression "
            "sees ctx (ctx.input, "
            f"ctx.<node output>) and the functions {sorted(SAFE_FUNCTIONS)}"
        )
    return tree.body


def _shape_problem(tree: ast.Expression) -> str | None:
    """Why the tree is too big or uses something not allowed; None if it is fine.

    Iterative (no recursion), so a deep tree is measured, not a RecursionError."""
    count = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_EXPRESSION_NODES:
            return f"more than {MAX_EXPRESSION_NODES} syntax nodes (the limit)"
        if depth > MAX_EXPRESSION_DEPTH:
            return f"nested more than {MAX_EXPRESSION_DEPTH} levels deep (the limit)"
        if not isinstance(node, _ALLOWED_NODES):
            return f"{type(node).__name__} is not allowed in a condition"
        # f"{x:>1000000}" builds a huge string from a short text: no format specs at all.
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            return "format specs in f-strings are not allowed in a condition"
        if isinstance(node, ast.Call):
            func = node.func
            # Only the name is known here, not the object: the list holds methods that
            # are harmless on any type they exist on.
            if isinstance(func, ast.Attribute):
                if func.attr not in SAFE_METHODS:
                    return (
                        f"method {func.attr!r} is not allowed in a condition (allowed: "
                        f"{', '.join(sorted(SAFE_METHODS))})"
                    )
            elif not isinstance(func, ast.Name):
                # A call of a computed value would get round the method list by name:
                # [ctx.update][0]({...}) calls dict.update. A call must name its callee.
                return "only named functions and allowed methods can be called"
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return None


def _unknown_names(root: ast.expr) -> set[str]:
    # A comprehension's variable counts as known anywhere in the expression, not only in
    # its own scope: looser than Python, and safe, since a name used outside its scope
    # fails at run time (simpleeval's NameNotDefined: the node's bad_expression).
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


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | bytes | list | tuple | dict | set) else 0


def _int_bits(value: Any) -> int:
    return abs(value).bit_length() if isinstance(value, int) else 0


class _Bounded(EvalWithCompoundTypes):  # type: ignore[misc]
    """simpleeval with a step count, a built-size budget and size-checked operators."""

    def __init__(self, names: dict[str, Any]) -> None:
        self.steps = 0
        self.built = 0
        # The Attribute nodes that are called (``d.get(...)``): methods. Every other one
        # on a dict reads a key (see _eval_attribute).
        self._callees: set[int] = set()
        # (node, value): an attribute's base already evaluated, handed to simpleeval's
        # own _eval_attribute so that it is not evaluated twice.
        self._known: tuple[ast.AST, Any] | None = None
        operators = dict(DEFAULT_OPERATORS)
        operators.update(
            {
                ast.Pow: self._pow,
                ast.Mult: self._mult,
                ast.Add: self._add,
                ast.LShift: self._lshift,
                ast.Mod: self._mod,
            }
        )
        super().__init__(operators=operators, functions=dict(FUNCTIONS), names=names)

    def _eval(self, node: ast.AST) -> Any:
        known = self._known
        if known is not None and known[0] is node:
            self._known = None
            return known[1]
        self.steps += 1
        if self.steps > MAX_EVAL_STEPS:
            raise ExpressionLimit(f"more than {MAX_EVAL_STEPS} evaluation steps")
        result = super()._eval(node)
        # Reads build nothing (a name, a constant, ctx.x, ctx["x"] return what exists):
        # charging them would let a large context use up the budget by being looked at.
        if not isinstance(node, ast.Name | ast.Constant | ast.Attribute | ast.Subscript):
            self._charge(_size(result))
        return result

    def _eval_call(self, node: ast.Call) -> Any:
        if isinstance(node.func, ast.Attribute):
            self._callees.add(id(node.func))
        return super()._eval_call(node)

    def _eval_attribute(self, node: ast.Attribute) -> Any:
        # simpleeval tries getattr before the key, so on a dict ``ctx.items`` would be the
        # bound method dict.items, not the node output "items" (and ``ctx.items == 3``
        # quietly False). Here ``.name`` on a dict is its key "name", and a missing key an
        # error; only a called one (``ctx.input.get("k")``) is the method. The dunder and
        # forbidden-name checks run in simpleeval's method either way, before the key is read.
        if node.attr.startswith(tuple(DISALLOW_PREFIXES)) or node.attr in DISALLOW_METHODS:
            return super()._eval_attribute(node)  # raises FeatureNotAvailable
        base = self._eval(node.value)
        if isinstance(base, dict) and id(node) not in self._callees:
            if node.attr in base:
                return base[node.attr]
            raise AttributeDoesNotExist(node.attr, self.expr)
        self._known = (node.value, base)
        try:
            return super()._eval_attribute(node)
        finally:
            self._known = None  # consumed by then; never left for another node

    def _charge(self, n: int) -> None:
        self.built += n
        if self.built > MAX_BUILT_LENGTH:
            raise ExpressionLimit(f"builds more than {MAX_BUILT_LENGTH} characters/items in all")

    def _room(self, n: int, what: str) -> None:
        if self.built + n > MAX_BUILT_LENGTH:
            raise ExpressionLimit(
                f"{what} would build {n} characters/items (the limit is {MAX_BUILT_LENGTH} in all)"
            )

    @staticmethod
    def _bits(bits: int, what: str) -> None:
        if bits > MAX_INT_BITS:
            raise ExpressionLimit(
                f"{what} would make an integer of about {bits} bits (the limit is {MAX_INT_BITS})"
            )

    def _pow(self, a: Any, b: Any) -> Any:
        # 0, 1 and -1 stay small under any power, and a negative exponent gives a float;
        # a huge b is estimated as over the limit without multiplying it out.
        if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
            self._bits(_int_bits(a) * b if b < 10**9 else 10**18, "**")
        return operator.pow(a, b)

    def _mult(self, a: Any, b: Any) -> Any:
        if isinstance(a, int) and isinstance(b, int):
            self._bits(_int_bits(a) + _int_bits(b), "*")
        # "x" * 10**9 or [0] * 10**9: the size is known before the product is built.
        for seq, n in ((a, b), (b, a)):
            if _size(seq) and isinstance(n, int):
                self._room(_size(seq) * max(n, 0), "*")
        return operator.mul(a, b)

    def _add(self, a: Any, b: Any) -> Any:
        if _size(a) and _size(b):
            self._room(_size(a) + _size(b), "+")
        return operator.add(a, b)

    def _lshift(self, a: Any, b: Any) -> Any:
        if isinstance(a, int) and isinstance(b, int) and b > 0:
            self._bits(_int_bits(a) + b, "<<")
        return operator.lshift(a, b)

    @staticmethod
    def _mod(a: Any, b: Any) -> Any:
        # "%099999999d" % 1: the width hides in the format, so its output size cannot be
        # checked first the way * and + are; % on a string is refused outright.
        if isinstance(a, str | bytes):
            raise ExpressionLimit("% formatting of strings is not allowed in a condition")
        return operator.mod(a, b)


def frozen_copy(value: Any) -> Any:
    """A private copy of JSON-like ``value`` (dicts, lists): what an evaluation sees, so
    nothing it does reaches the caller's data. Iterative: depth is no problem."""
    if not isinstance(value, dict | list):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    while stack:
        parent, key, item = stack.pop()
        if isinstance(item, dict):
            copy_d: dict[Any, Any] = {}
            parent[key] = copy_d
            stack.extend((copy_d, k, v) for k, v in item.items())
        elif isinstance(item, list | tuple):
            copy_l: list[Any] = [None] * len(item)
            parent[key] = copy_l
            stack.extend((copy_l, i, v) for i, v in enumerate(item))
        else:
            parent[key] = item
    return root[0]


def evaluate(parsed: ast.expr, text: str, ctx: Mapping[str, Any], *, private: bool = False) -> Any:
    """The value of the parsed expression ``parsed`` (``text`` is its source, for errors)
    with a private copy of ``ctx`` bound to the name ``ctx`` (``private``: ``ctx`` already
    is one, made by :func:`frozen_copy`). A fresh evaluator per call: nothing shared.

    Raises:
        ExpressionLimit: the evaluation went over a bound (see the module's docstring).
    """
    # The method allow-list is checked by name only; the copy is the second wall: nothing
    # an evaluation reaches is the runner's own data.
    evaluator = _Bounded(names={"ctx": ctx if private else frozen_copy(dict(ctx))})
    try:
        return evaluator.eval(text, previously_parsed=parsed)
    except LIMIT_ERRORS as exc:
        # A bound, not the data: the node fails with expression_limit and is not retried.
        raise ExpressionLimit(f"{type(exc).__name__}: {exc}") from None
