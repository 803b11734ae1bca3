"""Node handlers, and the registry of Python functions and queries DAG nodes may call.

A handler gets a :class:`NodeCall` (the node, its checked config, the context folded
from the log, its run and try) and returns a :class:`NodeResult`: the output written to
the context under the node's variable, the handle to follow (None: the default), and an
optional delay before the successors are due (the delay node: a durable timer, the
successors' tasks are simply due later; nothing sleeps).

Stored definitions never carry code: a ``python`` node names a function registered
here, a ``condition`` evaluates its expressions with simpleeval (no ``eval``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from ..errors import Fail, InputError
from .models import (
    DONE_HANDLE,
    ELSE_HANDLE,
    LOOP_HANDLE,
    ConditionConfig,
    DataQueryConfig,
    DelayConfig,
    EndConfig,
    LoopConfig,
    Node,
    PythonConfig,
)
from .templates import resolve

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Registered:
    name: str
    fn: Callable[..., Any]
    is_async: bool
    timeout: float | None


class Registry:
    """Functions (``python`` nodes) and queries (``data_query`` nodes), by name.

    ::

        registry = Registry()

        @registry.function("add")
        def add(a: int, b: int) -> int:
            return a + b
    """

    def __init__(self) -> None:
        self._functions: dict[str, Registered] = {}
        self._queries: dict[str, Registered] = {}

    def function(
        self, name: str | None = None, *, timeout: float | None = None
    ) -> Callable[[F], F]:
        """Register a sync or async function under ``name`` (default: its ``__name__``)."""

        def deco(fn: F) -> F:
            self.add_function(name or fn.__name__, fn, timeout=timeout)
            return fn

        return deco

    def query(self, name: str | None = None, *, timeout: float | None = None) -> Callable[[F], F]:
        """Register a data query under ``name``; it is called with the resolved args."""

        def deco(fn: F) -> F:
            self._queries[name or fn.__name__] = _registered(name or fn.__name__, fn, timeout)
            return fn

        return deco

    def add_function(
        self, name: str, fn: Callable[..., Any], *, timeout: float | None = None
    ) -> None:
        self._functions[name] = _registered(name, fn, timeout)

    def get_function(self, name: str) -> Registered:
        try:
            return self._functions[name]
        except KeyError:
            raise Fail(
                f"no function registered as {name!r} (known: {sorted(self._functions)})",
                code="unknown_function",
            ) from None

    def get_query(self, name: str) -> Registered:
        try:
            return self._queries[name]
        except KeyError:
            raise Fail(
                f"no query registered as {name!r} (known: {sorted(self._queries)})",
                code="unknown_query",
            ) from None


def _registered(name: str, fn: Callable[..., Any], timeout: float | None) -> Registered:
    return Registered(name, fn, inspect.iscoroutinefunction(fn), timeout)


@dataclass(frozen=True, slots=True)
class LoopState:
    """How a loop node was reached: first ``entry`` or ``back`` from its body."""

    entry: bool
    previous: Mapping[str, Any] | None
    """The loop node's own previous output (its iteration state)."""
    result: Any
    """What the body produced in the iteration that just ended (back-edge sources)."""


@dataclass(frozen=True)
class NodeCall:
    instance_id: str
    node: Node
    config: BaseModel
    ctx: Mapping[str, Any]
    run: int
    attempt: int
    registry: Registry
    pool: concurrent.futures.Executor
    loop: LoopState | None = None


@dataclass(frozen=True, slots=True)
class NodeResult:
    output: Any
    handle: str | None = None
    delay: float = 0.0


Handler = Callable[[NodeCall], Awaitable[NodeResult]]


async def _start(call: NodeCall) -> NodeResult:
    return NodeResult(call.ctx.get("input", {}))


async def _end(call: NodeCall) -> NodeResult:
    assert isinstance(call.config, EndConfig)
    return NodeResult(resolve(call.config.outputs, call.ctx))


async def _invoke(call: NodeCall, reg: Registered, args: Any, timeout: float | None) -> Any:
    if not isinstance(args, Mapping):
        raise Fail(f"args must resolve to a mapping, got {type(args).__name__}", code="bad_args")
    limit = timeout or reg.timeout or DEFAULT_TIMEOUT
    if reg.is_async:
        coro = reg.fn(**args)
    else:
        # A sync function runs in a thread so the timeout can give up on it; the thread
        # itself cannot be killed and finishes in the background.
        loop = asyncio.get_running_loop()
        coro = loop.run_in_executor(call.pool, functools.partial(reg.fn, **args))
    try:
        return await asyncio.wait_for(coro, limit)
    except TimeoutError:
        raise TimeoutError(f"{reg.name} did not finish within {limit} s") from None


async def _python(call: NodeCall) -> NodeResult:
    assert isinstance(call.config, PythonConfig)
    reg = call.registry.get_function(call.config.function)
    args = resolve(call.config.args, call.ctx)
    return NodeResult(await _invoke(call, reg, args, call.config.timeout))


async def _data_query(call: NodeCall) -> NodeResult:
    assert isinstance(call.config, DataQueryConfig)
    reg = call.registry.get_query(call.config.query)
    args = resolve(call.config.args, call.ctx)
    return NodeResult(await _invoke(call, reg, args, call.config.timeout))


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


async def _condition(call: NodeCall) -> NodeResult:
    assert isinstance(call.config, ConditionConfig)
    from simpleeval import DEFAULT_FUNCTIONS, EvalWithCompoundTypes

    evaluator = EvalWithCompoundTypes(
        names={"ctx": call.ctx}, functions={**DEFAULT_FUNCTIONS, **SAFE_FUNCTIONS}
    )
    for branch in call.config.branches:
        try:
            value = evaluator.eval(branch.when)
        except Exception as exc:
            raise Fail(
                f"branch {branch.handle!r}: {branch.when!r} failed: {type(exc).__name__}: {exc}",
                code="bad_expression",
            ) from exc
        if value:
            return NodeResult({"branch": branch.handle}, branch.handle)
    return NodeResult({"branch": ELSE_HANDLE}, ELSE_HANDLE)


async def _delay(call: NodeCall) -> NodeResult:
    assert isinstance(call.config, DelayConfig)
    raw = resolve(call.config.seconds, call.ctx)
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        raise Fail(f"delay seconds must be a number, got {raw!r}", code="bad_delay") from None
    if seconds < 0:
        raise Fail(f"delay seconds must be >= 0, got {seconds}", code="bad_delay")
    return NodeResult({"seconds": seconds}, None, seconds)


async def _loop(call: NodeCall) -> NodeResult:
    assert isinstance(call.config, LoopConfig)
    state = call.loop
    prev = state.previous if state is not None and not state.entry else None
    if prev is None:
        items = resolve(call.config.items, call.ctx)
        if not isinstance(items, list):
            raise Fail(f"loop items must be a list, got {type(items).__name__}", code="bad_items")
        index, results = 0, []
    else:
        items = list(prev.get("items", []))
        results = [*prev.get("results", []), state.result if state is not None else None]
        index = int(prev.get("index", -1)) + 1
    if index < len(items):
        out = {"item": items[index], "index": index, "items": items, "results": results}
        return NodeResult(out, LOOP_HANDLE)
    return NodeResult({"results": results, "count": len(results)}, DONE_HANDLE)


HANDLERS: dict[str, Handler] = {
    "start": _start,
    "end": _end,
    "python": _python,
    "data_query": _data_query,
    "condition": _condition,
    "delay": _delay,
    "loop": _loop,
}


def handler_for(node_type: str) -> Handler:
    try:
        return HANDLERS[node_type]
    except KeyError:
        raise InputError(f"no handler for node type {node_type!r} in this runner") from None
