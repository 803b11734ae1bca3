"""Shared pieces of the DAG integration tests: the registry, topologies and a runner."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Fail,
    Runner,
    RunnerOptions,
    StepContext,
    Store,
    Workflow,
    step,
)
from statemachine_wf.core.records import InstanceRecord
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition, Registry, node_context
from statemachine_wf.definition.dag_models import NodeRetry
from statemachine_wf.stores._dagcommit import DagCommits

registry = Registry()
calls: Counter[str] = Counter()
_lock = threading.Lock()


def shared_at_once(store: Store) -> Store:
    """``store`` with PostgreSQL's ``dag_sticky`` off: another runner takes a task one
    runner's commit dispatched at once, as it does once the stickiness is over (for tests
    of two runners racing on one instance's tasks)."""
    if isinstance(store, DagCommits):
        store.dag_sticky = 0.0
    return store


def _count(key: str) -> int:
    with _lock:
        calls[key] += 1
        return calls[key]


@registry.function("add")
def add(a: int, b: int) -> int:
    return a + b


@registry.function("double")
async def double(x: int) -> int:
    await asyncio.sleep(0)
    return x * 2


@registry.function("tag")
def tag(name: str, key: str = "") -> str:
    if key:
        _count(f"{key}:{name}")
    return name


@registry.function("boom")
def boom(message: str = "boom") -> None:
    raise RuntimeError(message)


@registry.function("flaky")
def flaky(key: str, fail_times: int) -> str:
    n = _count(key)
    if n <= fail_times:
        raise ConnectionError(f"try {n} fails")
    return f"ok after {n}"


@registry.function("thread_of", inline=True)
def thread_of(tag: str) -> dict[str, Any]:
    """The thread this call ran on, and the node it was told it ran for."""
    here = node_context()
    return {"tag": tag, "thread": threading.current_thread().name, "node": here.node}


@registry.function("thread_of_pooled")
def thread_of_pooled(tag: str) -> dict[str, Any]:
    return {"tag": tag, "thread": threading.current_thread().name}


@registry.function("slow", timeout=0.2)
def slow(seconds: float) -> str:
    threading.Event().wait(seconds)
    return "late"


@registry.function("pause")
def pause(seconds: float) -> str:
    """Takes ``seconds`` (a branch that finishes while a parallel delay still waits)."""
    threading.Event().wait(seconds)
    return "paused"


@registry.function("until_cancelled")
def until_cancelled(key: str) -> str:
    """Runs until its instance is cancelled (bounded at 20 s), then reports it."""
    _count(f"{key}:started")
    here = node_context()
    deadline = time.monotonic() + 20
    while not here.cancel_requested() and time.monotonic() < deadline:
        time.sleep(0.01)
    _count(f"{key}:saw_cancel" if here.cancel_requested() else f"{key}:timed_out")
    return "stopped"


# -- a state machine that DAGs run as a sub-workflow ------------------------------------------


class ChildInput(BaseModel):
    n: int
    fail: bool = False
    pause: float = 0.0
    """Seconds the first step takes (a SIGKILL lands while the child runs)."""
    until_cancelled: bool = False
    run: str = ""


class ChildProgress(BaseModel):
    doubled: int | None = None
    seen: int | None = None


def _child_mark(wf: Child, run: str, name: str) -> None:
    marks = getattr(wf, "marks", None)  # a worker process's mark file (dependencies)
    if marks and run:
        fd = os.open(marks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{run} {name}\n".encode())
        finally:
            os.close(fd)


@registry.workflow
class Child(Workflow[ChildInput, ChildProgress]):
    """Two steps: double the input (or fail, or wait to be cancelled), then echo it."""

    workflow_type = "dagtest.child.v1"

    @step(initial=True, to="echo")
    def work(self, ctx: StepContext[ChildInput, ChildProgress]) -> None:
        _child_mark(self, ctx.input.run, "child:work")
        deadline = time.monotonic() + (20 if ctx.input.until_cancelled else ctx.input.pause)
        while time.monotonic() < deadline and not ctx.cancel_requested:
            time.sleep(0.01)
        if ctx.input.fail:
            raise Fail("the child says no", code="child_no")
        ctx.set(doubled=ctx.input.n * 2)

    @step(to=COMPLETED)
    def echo(self, ctx: StepContext[ChildInput, ChildProgress]) -> None:
        _child_mark(self, ctx.input.run, "child:echo")
        ctx.set(seen=ctx.input.n)


def py(builder: DagBuilder, node_id: str, function: str, /, **kw: Any) -> str:
    extra = {
        k: kw.pop(k) for k in ("join", "error_handling", "retry", "output_variable") if k in kw
    }
    return builder.node(node_id, "python", function=function, args=kw, **extra)


FAST_RETRY = NodeRetry(max_attempts=3, initial_delay=0.05, max_delay=0.1)


# -- topologies -----------------------------------------------------------------------------


def linear(n: int = 3) -> DagDefinition:
    b = DagBuilder("linear")
    b.node("s", "start")
    prev = "s"
    for i in range(n):
        arg = "{{ctx.input.x}}" if i == 0 else f"{{{{ctx.n{i - 1}}}}}"
        py(b, f"n{i}", "add", a=arg, b=1)
        b.edge(prev, f"n{i}")
        prev = f"n{i}"
    b.node("e", "end", outputs={"result": f"{{{{ctx.{prev}}}}}"})
    b.edge(prev, "e")
    return b.build()


def fan_out(width: int = 5) -> DagDefinition:
    b = DagBuilder("fan_out")
    b.node("s", "start")
    b.node("e", "end", outputs={f"b{i}": f"{{{{ctx.b{i}}}}}" for i in range(width)})
    for i in range(width):
        py(b, f"b{i}", "add", a="{{ctx.input.x}}", b=i)
        b.chain("s", f"b{i}", "e")
    return b.build()


def fan_in(width: int = 4) -> DagDefinition:
    """Parallel two-node branches that meet in one join, then the end."""
    b = DagBuilder("fan_in")
    b.node("s", "start")
    py(b, "join", "add", a="{{ctx.x0}}", b="{{ctx.x1}}")
    b.node("e", "end", outputs={"sum": "{{ctx.join}}"})
    for i in range(width):
        py(b, f"p{i}", "add", a="{{ctx.input.x}}", b=i)
        py(b, f"x{i}", "double", x=f"{{{{ctx.p{i}}}}}")
        b.chain("s", f"p{i}", f"x{i}", "join")
    b.edge("join", "e")
    return b.build()


def diamond(join: str = "all", key: str = "") -> DagDefinition:
    b = DagBuilder(f"diamond_{join}")
    b.node("s", "start")
    py(b, "a", "tag", name="a", key=key)
    py(b, "l", "tag", name="l", key=key)
    py(b, "r", "tag", name="r", key=key)
    py(b, "d", "tag", name="d", key=key, join=join)
    b.node("e", "end", outputs={"d": "{{ctx.d}}"})
    b.chain("s", "a", "l", "d", "e")
    b.chain("a", "r", "d")
    return b.build()


def deep_chain(n: int = 100) -> DagDefinition:
    b = DagBuilder("deep_chain")
    b.node("s", "start")
    prev = "s"
    for i in range(n):
        arg = "{{ctx.input.x}}" if i == 0 else f"{{{{ctx.c{i - 1}}}}}"
        py(b, f"c{i}", "add", a=arg, b=1)
        b.edge(prev, f"c{i}")
        prev = f"c{i}"
    b.node("e", "end", outputs={"result": f"{{{{ctx.{prev}}}}}"})
    b.edge(prev, "e")
    return b.build()


def error_continue() -> DagDefinition:
    b = DagBuilder("error_continue")
    b.node("s", "start")
    py(b, "a", "boom", message="card declined", error_handling="continue")
    py(b, "ok", "tag", name="happy")
    py(b, "handle", "tag", name="{{ctx.a.error.message}}")
    b.node("e", "end", outputs={"handled": "{{ctx.handle}}"}, join="any")
    b.chain("s", "a", "ok", "e")
    b.edge("a", "handle", handle="error")
    b.edge("handle", "e")
    return b.build()


def error_fail(retry: NodeRetry | None = FAST_RETRY) -> DagDefinition:
    b = DagBuilder("error_fail")
    b.node("s", "start")
    py(b, "a", "boom", message="always", retry=retry)
    b.node("e", "end")
    b.chain("s", "a", "e")
    return b.build()


def flaky_chain(key: str, fail_times: int) -> DagDefinition:
    b = DagBuilder("flaky")
    b.node("s", "start")
    py(b, "a", "flaky", key=key, fail_times=fail_times, retry=FAST_RETRY)
    b.node("e", "end", outputs={"a": "{{ctx.a}}"})
    b.chain("s", "a", "e")
    return b.build()


def conditional() -> DagDefinition:
    b = DagBuilder("conditional")
    b.node("s", "start")
    b.node(
        "c",
        "condition",
        branches=[
            {"handle": "big", "when": "ctx.input.n > 100"},
            {"handle": "mid", "when": "ctx.input.n > 10 and len(ctx.input.tags) > 0"},
        ],
    )
    # Each branch writes the same variable: whichever ran is the answer.
    for name in ("big", "mid", "small"):
        py(b, name, "tag", name=name, output_variable="size")
        b.edge(name, "e")
    b.node("e", "end", join="any", outputs={"size": "{{ctx.size}}"})
    b.edge("s", "c")
    for name, handle in (("big", "big"), ("mid", "mid"), ("small", "else")):
        b.edge("c", name, handle=handle)
    return b.build()


def delayed(seconds: float) -> DagDefinition:
    b = DagBuilder("delay")
    b.node("s", "start")
    b.node("wait", "delay", seconds="{{ctx.input.seconds}}")
    py(b, "after", "tag", name="after")
    b.node("e", "end", outputs={"after": "{{ctx.after}}", "waited": "{{ctx.wait.seconds}}"})
    b.chain("s", "wait", "after", "e")
    return b.build()


def multi_level_join() -> DagDefinition:
    b = DagBuilder("multi_level_join")
    b.node("s", "start")
    for leaf in "abcd":
        py(b, leaf, "tag", name=leaf)
        b.edge("s", leaf)
    py(b, "j1", "add", a="{{ctx.a}}", b="{{ctx.b}}")
    py(b, "j2", "add", a="{{ctx.c}}", b="{{ctx.d}}")
    py(b, "j3", "add", a="{{ctx.j1}}", b="{{ctx.j2}}")
    b.node("e", "end", outputs={"all": "{{ctx.j3}}"})
    b.chain("a", "j1")
    b.chain("b", "j1")
    b.chain("c", "j2")
    b.chain("d", "j2")
    b.chain("j1", "j3", "e")
    b.chain("j2", "j3")
    return b.build()


def sub_workflow(error_handling: str = "fail_workflow") -> DagDefinition:
    """start -> sub (a Child state machine) -> end; with ``continue``, an error path too."""
    b = DagBuilder(f"sub_workflow_{error_handling}")
    b.node("s", "start")
    b.node(
        "sub",
        "sub_workflow",
        workflow="dagtest.child.v1",
        input={
            "n": "{{ctx.input.n}}",
            "fail": "{{ctx.input.fail}}",
            "pause": "{{ctx.input.pause}}",
            "until_cancelled": "{{ctx.input.until_cancelled}}",
            "run": "{{ctx.input.run}}",
        },
        error_handling=error_handling,  # type: ignore[arg-type]
    )
    b.node("e", "end", join="any", outputs={"child": "{{ctx.sub}}"})
    b.chain("s", "sub", "e")
    if error_handling == "continue":
        py(b, "handle", "tag", name="{{ctx.sub.error.code}}")
        b.edge("sub", "handle", handle="error")
        b.edge("handle", "e")
    return b.build()


def child_input(n: int = 1, **kw: Any) -> dict[str, Any]:
    return {"n": n, "fail": False, "pause": 0.0, "until_cancelled": False, "run": "", **kw}


def loop() -> DagDefinition:
    b = DagBuilder("loop")
    b.node("s", "start")
    b.node("each", "loop", items="{{ctx.input.items}}")
    py(b, "body", "double", x="{{ctx.each.item}}")
    py(b, "body2", "add", a="{{ctx.body}}", b="{{ctx.each.index}}")
    b.node("e", "end", outputs={"results": "{{ctx.each.results}}", "n": "{{ctx.each.count}}"})
    b.edge("s", "each")
    b.edge("each", "body", handle="loop")
    b.chain("body", "body2", "each")
    b.edge("each", "e", handle="done")
    return b.build()


@contextmanager
def running(store: Store, *, concurrency: int = 4, lease: float = 30.0) -> Iterator[Runner]:
    runner = Runner(
        store,
        [Child],
        dags=registry,
        options=RunnerOptions(concurrency=concurrency, lease=lease, idle_poll=0.5),
    )
    runner.start()
    try:
        yield runner
    finally:
        runner.stop(timeout=10)


def run_to_end(
    store: Store, definition: DagDefinition, data: dict[str, Any] | None = None
) -> tuple[DagClient, str, InstanceRecord]:
    """Start ``definition`` and run it with :func:`running` until it ends (30 s at most):
    the client, the instance's id and its final record."""
    client = DagClient(store)
    with running(store):
        iid = client.start(definition, data or {})
        record = client.wait(iid, timeout=30)
    return client, iid, record


ROOT = Path(__file__).resolve().parents[3]


@contextmanager
def runner_processes(
    url: str, schema: str, marks: Path, *, count: int = 2, concurrency: int = 4, lease: float = 30.0
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` runner processes (worker_main) on the store at ``url``, stopped at the end.

    Yields once every process has printed READY; their stderr goes to files beside MARKS.
    """
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        for n in range(count):
            logs.append((marks.parent / f"runner-{n}.log").open("wb"))
            args = [url, schema, str(marks), str(concurrency), str(lease)]
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.integration.dag.worker_main", *args],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=logs[-1],
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith(b"READY")
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        for f in logs:
            f.close()


def marked(marks: Path) -> int:
    """How many node runs the ``mark`` function recorded in ``marks`` (worker_main)."""
    return len(marks.read_text().split("\n")) - 1 if marks.exists() else 0


def kill_when_marked(victim: subprocess.Popen[bytes], marks: Path, runs: int) -> None:
    """SIGKILL ``victim`` (a :func:`runner_processes` process) once ``runs`` node runs are
    marked; within a minute, or the test fails."""
    deadline = time.monotonic() + 60
    while marked(marks) < runs:
        assert time.monotonic() < deadline, f"the victim never marked {runs} runs"
        time.sleep(0.002)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
