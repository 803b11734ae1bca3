"""Node handlers, and the registry of Python functions and queries DAG nodes may call.

A handler gets a :class:`NodeCall` (the node, its checked config, the context folded
from the log, its run and try) and returns a :class:`NodeResult`: the output written to
the context under the node's variable, the handle to follow (None: the default), and an
optional delay (the delay node): the run then waits on a durable timer -- its own task is
due when the time has come, nothing sleeps -- and completes only then, so nothing
downstream of it can run before.

Stored definitions never carry code: a ``python`` node names a function registered
here, a ``condition`` evaluates its expressions with simpleeval (no ``eval``; parsed
once when the definition is loaded, bounded, on a private copy of the context, see
:mod:`.dag_expressions`), a ``sub_workflow`` names a state-machine workflow type the
registry allows (:meth:`Registry.workflow`, :meth:`Registry.allow_workflow`).

A registered function can read :func:`node_context` while it runs (its instance, node,
run and try, and whether the instance was cancelled meanwhile).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from ..core.store import NewInstance, Store
from ..definition.dag_definition import (
    DONE_HANDLE,
    ELSE_HANDLE,
    LOOP_HANDLE,
    ConditionConfig,
    DagDefinition,
    DataQueryConfig,
    DelayConfig,
    EndConfig,
    LoopConfig,
    Node,
    PythonConfig,
    SubWorkflowConfig,
)
from ..definition.dag_expressions import EXPRESSION_ERRORS, ExpressionLimit, evaluate, frozen_copy
from ..definition.dag_templates import resolve
from ..definition.events import Status
from ..definition.ids import new_instance_id
from ..definition.limits import check_payload
from ..errors import DefinitionError, Fail, InputError

if TYPE_CHECKING:
    from ..definition.workflow import Workflow

    WorkflowClass = type[Workflow[Any, Any]]

F = TypeVar("F", bound=Callable[..., Any])
W = TypeVar("W", bound="type[Workflow[Any, Any]]")

DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Registered:
    name: str
    fn: Callable[..., Any]
    is_async: bool
    timeout: float | None
    inline: bool = False
    """Run on the worker's own thread, with no timeout (``Registry.function(inline=True)``)."""


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
        self._workflows: dict[str, WorkflowClass] = {}
        self._allowed: set[str] = set()

    def workflow(self, cls: W) -> W:
        """Allow ``sub_workflow`` nodes to start the state-machine workflow ``cls`` (by its
        type name). Usable as a class decorator.

        The registry's workflows are an allow-list: a ``sub_workflow`` node can start only
        these (and the names given to :meth:`allow_workflow`), never any other workflow
        a runner happens to host.
        """
        name = cls.spec().workflow_type
        self._workflows[name] = cls
        self._allowed.add(name)
        return cls

    def allow_workflow(self, *names: str) -> None:
        """Allow ``sub_workflow`` nodes to start the workflows of these type names that the
        runner hosts (its own workflow classes), without registering the classes here."""
        for name in names:
            if not name:
                raise ValueError("a workflow type name must not be empty")
            self._allowed.add(name)

    @property
    def workflow_targets(self) -> frozenset[str]:
        """The workflow types ``sub_workflow`` nodes may start (the allow-list)."""
        return frozenset(self._allowed)

    def get_workflow(
        self, name: str, hosted: Mapping[str, WorkflowClass] | None = None
    ) -> WorkflowClass:
        """The class to start for a ``sub_workflow`` target.

        Raises:
            Fail: ``workflow_not_allowed`` (not in the allow-list) or ``unknown_workflow``
                (allowed, but neither registered nor hosted by this runner).
        """
        if name not in self._allowed:
            raise Fail(
                f"sub_workflow target {name!r} is not allowed by the DAG registry (allowed: "
                f"{sorted(self._allowed)}): register it with Registry.workflow(cls) or "
                "Registry.allow_workflow(name)",
                code="workflow_not_allowed",
            )
        cls = self._workflows.get(name) or (hosted or {}).get(name)
        if cls is None:
            raise Fail(
                f"no workflow registered as {name!r} (known: "
                f"{sorted({*self._workflows, *(hosted or {})})})",
                code="unknown_workflow",
            )
        return cls

    def check_definition(self, definition: DagDefinition) -> None:
        """Refuse a definition whose ``sub_workflow`` nodes start a workflow not allowed.

        Raises:
            DefinitionError: one line per such node.
        """
        problems = []
        for node in definition.nodes:
            if node.type != "sub_workflow":
                continue
            target = node.config.get("workflow")
            if isinstance(target, str) and target not in self._allowed:
                problems.append(
                    f"node {node.id!r}: sub_workflow target {target!r} is not allowed by the "
                    f"DAG registry (allowed: {sorted(self._allowed)})"
                )
        if problems:
            raise DefinitionError(f"DAG {definition.name!r}", problems)

    def function(
        self, name: str | None = None, *, timeout: float | None = None, inline: bool = False
    ) -> Callable[[F], F]:
        """Register a sync or async function under ``name`` (default: its ``__name__``).

        A sync function runs on a thread of the runner's pool, which the worker gives up
        on after the timeout (the node's, else ``timeout``, else 30 s). ``inline=True``
        runs it on the worker's own thread instead, as a state-machine step without a
        ``timeout`` runs: no hand-over between threads (about a tenth of a no-op
        node's runner CPU), and no timeout, so a call that hangs holds its worker.

        Raises:
            InputError: ``inline`` with a ``timeout``, or with an async function.
        """

        def deco(fn: F) -> F:
            self.add_function(name or fn.__name__, fn, timeout=timeout, inline=inline)
            return fn

        return deco

    def query(
        self, name: str | None = None, *, timeout: float | None = None, inline: bool = False
    ) -> Callable[[F], F]:
        """Register a data query under ``name``; it is called with the resolved args.
        ``timeout`` and ``inline`` as for :meth:`function`."""

        def deco(fn: F) -> F:
            key = name or fn.__name__
            self._queries[key] = _registered(key, fn, timeout, inline)
            return fn

        return deco

    def add_function(
        self,
        name: str,
        fn: Callable[..., Any],
        *,
        timeout: float | None = None,
        inline: bool = False,
    ) -> None:
        self._functions[name] = _registered(name, fn, timeout, inline)

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


def _registered(
    name: str, fn: Callable[..., Any], timeout: float | None, inline: bool = False
) -> Registered:
    is_async = inspect.iscoroutinefunction(fn)
    if inline and is_async:
        raise InputError(f"{name!r} is async: inline=True is for sync functions only")
    if inline and timeout is not None:
        raise InputError(
            f"{name!r}: inline=True runs the function on the worker's thread, where a "
            f"timeout ({timeout} s) cannot be kept: give one or the other"
        )
    return Registered(name, fn, is_async, timeout, inline)


@dataclass(frozen=True, slots=True)
class LoopState:
    """How a loop node was reached: first ``entry`` or ``back`` from its body."""

    entry: bool
    previous: Mapping[str, Any] | None
    """The loop node's own previous output (its iteration state)."""
    result: Any
    """What the body produced in the iteration that just ended (back-edge sources)."""
    items: list[Any] | None = None
    """The round's items: recorded once, in the output of its first iteration."""
    results: list[Any] | None = None
    """Every iteration's result, gathered once the last iteration has ended."""


def _never() -> bool:
    return False


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
    store: Store | None = None
    """The runner's store (``sub_workflow`` nodes start their child through it)."""
    workflows: Mapping[str, WorkflowClass] = field(default_factory=dict)
    """The runner's hosted workflow classes, by type (besides the registry's)."""
    cancelled: Callable[[], bool] = _never
    """True once the instance has been cancelled (read from the store on each call)."""


@dataclass(frozen=True)
class NodeContext:
    """What a registered function can learn about the node it runs for.

    Attributes:
        run: the node's run: 1, 2, ... -- one per time the node is dispatched, so inside
            a loop body one per iteration; every retry of a run keeps it.
        attempt: the node's try, counted over *all* its runs: it does not restart at 1
            in a loop's next iteration (the third iteration's first try of a body node
            that never failed is 3).
    """

    instance_id: str
    node: str
    run: int
    attempt: int
    _cancelled: Callable[[], bool]

    @property
    def idempotency_key(self) -> str:
        """``swf.dag/<instance>/<node>/<run>``: the same for every try of this run (a
        retry, or a re-run after a crash), different for each loop iteration. Hand it to
        the system the node changes, so a repeated call has no second effect."""
        return child_key(self.instance_id, self.node, self.run)

    def cancel_requested(self) -> bool:
        """True once the instance has been cancelled: stop early, the result is dropped."""
        return self._cancelled()


_current: contextvars.ContextVar[NodeContext] = contextvars.ContextVar("swf_dag_node")


def node_context() -> NodeContext:
    """The node a registered function is running for.

    Raises:
        RuntimeError: called outside a DAG node's function.
    """
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("node_context() works only inside a DAG node's function") from None


class ChildRunning(Exception):
    """The sub-workflow's child is still running: the node parks until it ends."""

    def __init__(self, child_id: str) -> None:
        super().__init__(child_id)
        self.child_id = child_id


@dataclass(frozen=True, slots=True)
class NodeResult:
    output: Any
    handle: str | None = None
    delay: float = 0.0


Handler = Callable[[NodeCall], Coroutine[Any, Any, NodeResult]]


async def _start(call: NodeCall) -> NodeResult:
    return NodeResult(call.ctx.get("input", {}))


async def _end(call: NodeCall) -> NodeResult:
    if not isinstance(call.config, EndConfig):
        raise TypeError(f"{call.node.id}: expected EndConfig, got {call.config!r}")
    return NodeResult(resolve(call.config.outputs, call.ctx))


async def _invoke(call: NodeCall, reg: Registered, args: Any, timeout: float | None) -> Any:
    if not isinstance(args, Mapping):
        raise Fail(f"args must resolve to a mapping, got {type(args).__name__}", code="bad_args")
    if reg.inline and timeout is not None:
        raise Fail(
            f"node {call.node.id!r} sets a timeout ({timeout} s), but {reg.name!r} runs "
            "inline (registered with inline=True), where no timeout can be kept",
            code="bad_config",
        )
    limit = timeout or reg.timeout or DEFAULT_TIMEOUT
    here = NodeContext(call.instance_id, call.node.id, call.run, call.attempt, call.cancelled)
    token = _current.set(here)
    try:
        if reg.inline:
            return reg.fn(**args)  # on this worker's thread: no hand-over, no timeout
        if not reg.is_async:
            return _call_sync(call, reg, args, limit)
        deadline = asyncio.timeout(limit)
        try:
            async with deadline:
                return await reg.fn(**args)
        except TimeoutError:
            if not deadline.expired():
                raise  # the function's own TimeoutError (a socket's, say): not the node's
            raise TimeoutError(f"{reg.name} did not finish within {limit} s") from None
    finally:
        _current.reset(token)


def _call_sync(call: NodeCall, reg: Registered, args: Mapping[str, Any], limit: float) -> Any:
    """A sync function, run on the pool so that the timeout can give up on it (the thread
    cannot be killed and finishes in the background).

    The worker waits for it here, on its own thread (:func:`run_handler` runs such a node
    with no event loop). Going through ``run_in_executor`` and an asyncio timeout took two
    wake-ups of the loop's self-pipe a node, each a hand-over of the GIL between the
    runner's threads: 11-21% of a node's CPU (bench/README.md, "a sync node function").
    """
    # In a copy of this context: a pool thread does not inherit context variables, and
    # the function's node_context() reads the one _invoke set.
    run = contextvars.copy_context().run
    future = call.pool.submit(functools.partial(run, reg.fn, **args))
    try:
        return future.result(timeout=limit)
    except TimeoutError:
        if future.done():
            raise  # the function's own TimeoutError (a socket's, say): not the node's
        raise TimeoutError(f"{reg.name} did not finish within {limit} s") from None


async def _python(call: NodeCall) -> NodeResult:
    if not isinstance(call.config, PythonConfig):
        raise TypeError(f"{call.node.id}: expected PythonConfig, got {call.config!r}")
    reg = call.registry.get_function(call.config.function)
    args = resolve(call.config.args, call.ctx)
    return NodeResult(await _invoke(call, reg, args, call.config.timeout))


async def _data_query(call: NodeCall) -> NodeResult:
    if not isinstance(call.config, DataQueryConfig):
        raise TypeError(f"{call.node.id}: expected DataQueryConfig, got {call.config!r}")
    reg = call.registry.get_query(call.config.query)
    args = resolve(call.config.args, call.ctx)
    return NodeResult(await _invoke(call, reg, args, call.config.timeout))


class InternalError(Exception):
    """The runtime, not the node's data or config, failed (an interpreter error while
    evaluating an expression, say): the node is retried and never FAILS the instance for
    it (after its retries the runner quarantines the instance: STALLED, redrivable)."""


def _short(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters: an error message built from data (a missing
    key's repr, say) must not copy that data into the log."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


async def _condition(call: NodeCall) -> NodeResult:
    if not isinstance(call.config, ConditionConfig):
        raise TypeError(f"{call.node.id}: expected ConditionConfig, got {call.config!r}")
    # One private copy for every branch: an expression never reaches the runner's cache.
    ctx = frozen_copy(dict(call.ctx))
    for branch in call.config.branches:
        try:
            value = evaluate(branch.parsed, branch.when, ctx, private=True)
        except ExpressionLimit as exc:
            raise Fail(
                f"branch {branch.handle!r}: {_short(branch.when)!r} went over a limit: "
                f"{_short(str(exc))}",
                code="expression_limit",
            ) from None
        except EXPRESSION_ERRORS as exc:
            raise Fail(
                f"branch {branch.handle!r}: {_short(branch.when)!r} failed: "
                f"{type(exc).__name__}: {_short(str(exc))}",
                code="bad_expression",
            ) from exc
        except Exception as exc:
            raise InternalError(
                f"branch {branch.handle!r}: evaluating {_short(branch.when)!r} raised "
                f"{type(exc).__name__}: {_short(str(exc))}"
            ) from exc
        if value:
            return NodeResult({"branch": branch.handle}, branch.handle)
    return NodeResult({"branch": ELSE_HANDLE}, ELSE_HANDLE)


async def _delay(call: NodeCall) -> NodeResult:
    if not isinstance(call.config, DelayConfig):
        raise TypeError(f"{call.node.id}: expected DelayConfig, got {call.config!r}")
    raw = resolve(call.config.seconds, call.ctx)
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        raise Fail(f"delay seconds must be a number, got {raw!r}", code="bad_delay") from None
    if seconds < 0:
        raise Fail(f"delay seconds must be >= 0, got {seconds}", code="bad_delay")
    return NodeResult({"seconds": seconds}, None, seconds)


async def _loop(call: NodeCall) -> NodeResult:
    """One step of a loop: its next item on ``loop``, or its results on ``done``.

    The item list is written to the log once, in the round's first output
    (``{item, index, items, start}``); each later iteration's output is
    ``{item, index, result, start}`` -- the previous iteration's result -- so a round of
    n items logs O(n), not the whole list (and every result so far) n times.
    """
    if not isinstance(call.config, LoopConfig):
        raise TypeError(f"{call.node.id}: expected LoopConfig, got {call.config!r}")
    state = call.loop
    prev = state.previous if state is not None and not state.entry else None
    if prev is None or state is None:
        items = resolve(call.config.items, call.ctx)
        if not isinstance(items, list):
            raise Fail(f"loop items must be a list, got {type(items).__name__}", code="bad_items")
        if not items:
            return NodeResult({"results": [], "count": 0}, DONE_HANDLE)
        out = {"item": items[0], "index": 0, "items": items, "start": call.run}
        return NodeResult(out, LOOP_HANDLE)
    if state.items is None:
        raise Fail(f"loop {call.node.id!r}: the round's items are not in the log", code="bad_items")
    index = int(prev.get("index", -1)) + 1
    start = prev.get("start", call.run - 1)
    if index < len(state.items):
        out = {"item": state.items[index], "index": index, "result": state.result}
        return NodeResult({**out, "start": start}, LOOP_HANDLE)
    results = list(state.results or [])
    return NodeResult({"results": results, "count": len(results)}, DONE_HANDLE)


def child_key(instance_id: str, node: str, run: int) -> str:
    """The idempotency key of a sub-workflow node's child: one child per node run."""
    return f"swf.dag/{instance_id}/{node}/{run}"


async def _sub_workflow(call: NodeCall) -> NodeResult:
    """Start the child (once per node run), then: its progress, its failure, or park."""
    if not isinstance(call.config, SubWorkflowConfig):
        raise TypeError(f"{call.node.id}: expected SubWorkflowConfig, got {call.config!r}")
    if call.store is None:
        raise Fail("sub_workflow nodes run only in a runner", code="no_store")
    cls = call.registry.get_workflow(call.config.workflow, call.workflows)
    spec = cls.spec()
    raw = resolve(call.config.input, call.ctx)
    data = spec.input_model.model_validate(raw)  # a ValidationError names the field
    child_input = data.model_dump(mode="json")
    # The limit Client.start enforces; PayloadTooLarge is bad input: not retried.
    check_payload(f"sub-workflow {spec.workflow_type} input", child_input)
    # Keyed by the node's run, not its try: a retry, a duplicate delivery or a takeover
    # of this run finds the child its first try started (the fresh id then goes unused).
    child_id, _ = call.store.create(
        NewInstance(
            id=new_instance_id(),
            type=spec.workflow_type,
            input=child_input,
            initial=spec.initial,
            idempotency_key=child_key(call.instance_id, call.node.id, call.run),
            parent_id=call.instance_id,
            parent_node=call.node.id,
        )
    )
    child = call.store.get(child_id)
    if child is None or child.type != spec.workflow_type:
        raise Fail(f"child {child_id} of {call.node.id!r} is missing or of another type")
    if child.status == Status.COMPLETED:
        return NodeResult(dict(child.progress))
    if child.status in (Status.FAILED, Status.CANCELLED):
        # A Fail, never retried: another try of this run would find this same ended child.
        why = (child.error or {}).get("message", "")
        raise Fail(
            f"sub-workflow {spec.workflow_type} {child_id} ended {child.status}"
            + (f": {why}" if why else ""),
            code=f"sub_workflow_{child.status.lower()}",
        )
    raise ChildRunning(child_id)


HANDLERS: dict[str, Handler] = {
    "start": _start,
    "end": _end,
    "python": _python,
    "data_query": _data_query,
    "condition": _condition,
    "delay": _delay,
    "loop": _loop,
    "sub_workflow": _sub_workflow,
}


def handler_for(node_type: str) -> Handler:
    try:
        return HANDLERS[node_type]
    except KeyError:
        raise InputError(f"no handler for node type {node_type!r} in this runner") from None


def run_handler(call: NodeCall, loop: Callable[[], asyncio.AbstractEventLoop]) -> NodeResult:
    """Run the node's handler on the calling worker thread.

    Handlers are coroutines, but only an ``async`` registered function awaits anything:
    every other handler finishes at its coroutine's first step, which is run here with no
    event loop. ``run_until_complete`` would wrap it in a task and turn the loop once
    (about a sixth of a SQLite fan-out node's samples: bench/README.md, "A node's handler
    run without its event loop"). An async function runs on the thread's ``loop()``.
    """
    handler = handler_for(call.node.type)
    if _awaits(call):
        return loop().run_until_complete(handler(call))
    coro = handler(call)
    try:
        coro.send(None)
    except StopIteration as done:
        result: NodeResult = done.value
        return result
    coro.close()  # a handler that awaited after all: a bug here, never the node's data
    raise InternalError(f"the {call.node.type!r} handler of {call.node.id!r} awaited")


def _awaits(call: NodeCall) -> bool:
    """Whether the node's handler awaits: a ``python``/``data_query`` node whose function
    is ``async`` (an unknown name raises here as the handler would: the node fails)."""
    if isinstance(call.config, PythonConfig):
        return call.registry.get_function(call.config.function).is_async
    if isinstance(call.config, DataQueryConfig):
        return call.registry.get_query(call.config.query).is_async
    return False
