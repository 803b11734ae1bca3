"""``run_handler``: a node whose handler awaits nothing runs with no event loop; an
``async`` registered function runs on the worker thread's loop; a handler that awaits
unexpectedly is refused as an internal error, not left half-run."""

from __future__ import annotations

import asyncio
import concurrent.futures
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from statemachine_wf.dag import DagBuilder, Registry, check, node_context
from statemachine_wf.errors import Fail
from statemachine_wf.runtime import dag_handlers
from statemachine_wf.runtime.dag_handlers import InternalError, NodeCall, NodeResult, run_handler


def no_loop() -> asyncio.AbstractEventLoop:
    raise AssertionError("this node needs no event loop")


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(2) as p:
        yield p


def python_call(registry: Registry, pool: concurrent.futures.Executor, fn: str) -> NodeCall:
    b = DagBuilder("one_call")
    b.node("s", "start")
    b.node("f", "python", function=fn, args={"x": "{{ctx.input.x}}"})
    b.node("e", "end")
    b.edge("s", "f")
    b.edge("f", "e")
    graph = check(b.build())
    return NodeCall(
        instance_id="i-1",
        node=graph.nodes["f"],
        config=graph.config("f"),
        ctx={"input": {"x": 20}},
        run=3,
        attempt=2,
        registry=registry,
        pool=pool,
    )


def test_a_sync_function_runs_without_the_event_loop(
    pool: concurrent.futures.ThreadPoolExecutor,
) -> None:
    reg = Registry()
    seen: list[Any] = []

    @reg.function("add")
    def add(x: int) -> int:
        ctx = node_context()
        seen.append((ctx.instance_id, ctx.node, ctx.run, ctx.attempt))
        return x + 1

    result = run_handler(python_call(reg, pool, "add"), no_loop)
    assert result == NodeResult(21)
    assert seen == [("i-1", "f", 3, 2)]  # node_context() reaches the pool thread


def test_an_async_function_runs_on_the_threads_loop(
    pool: concurrent.futures.ThreadPoolExecutor,
) -> None:
    reg = Registry()
    loop = asyncio.new_event_loop()
    ran_on: list[asyncio.AbstractEventLoop] = []

    @reg.function("add")
    async def add(x: int) -> int:
        await asyncio.sleep(0)
        ran_on.append(asyncio.get_running_loop())
        return x + node_context().run

    try:
        assert run_handler(python_call(reg, pool, "add"), lambda: loop) == NodeResult(23)
    finally:
        loop.close()
    assert ran_on == [loop]


def test_an_unknown_function_fails_the_node_as_before(
    pool: concurrent.futures.ThreadPoolExecutor,
) -> None:
    with pytest.raises(Fail, match="no function registered as 'nope'") as failed:
        run_handler(python_call(Registry(), pool, "nope"), no_loop)
    assert failed.value.code == "unknown_function"  # a Fail: not retried


def test_a_handler_that_awaits_unexpectedly_is_an_internal_error(
    monkeypatch: pytest.MonkeyPatch, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    steps: list[str] = []

    async def awaiting(call: NodeCall) -> NodeResult:
        steps.append("before")
        try:
            await asyncio.sleep(0)
            steps.append("after")  # never: the coroutine is closed, not resumed
            return NodeResult(None)
        finally:
            steps.append("closed")

    monkeypatch.setitem(dag_handlers.HANDLERS, "start", awaiting)
    b = DagBuilder("start_only")
    b.node("s", "start")
    b.node("e", "end")
    b.edge("s", "e")
    graph = check(b.build())
    call = NodeCall("i", graph.nodes["s"], graph.config("s"), {}, 1, 1, Registry(), pool)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine ... was never awaited"
        with pytest.raises(InternalError, match="'start' handler of 's' awaited"):
            run_handler(call, no_loop)
    assert steps == ["before", "closed"]
