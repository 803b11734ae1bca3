"""The DAG benchmark: nodes per second beside the state-machine step rate of the same run.

Two shapes of no-op ``python`` nodes (``bench/dag.py``'s registry):

* ``fanout``: start -> 100 parallel nodes -> one join (``all``) -> end (103 nodes);
* ``chain``: start -> 100 nodes in a row -> end (102 nodes);
* ``slowfan`` (``--shapes``, not run by default): one instance of two fan-outs in a row,
  start -> 64 nodes that each sleep 0.2 s -> join -> 64 more -> join -> end, each stage
  timed from the log (dispatch to its join's start): what keeping a runner's dispatched
  tasks to it (PostgreSQL's ``dag_sticky``) costs fan-outs of slow nodes, the first
  before the runner has measured the function and the second after.

Per store (SQLite, PostgreSQL) and process count (1, 4): first the core benchmark's
state-machine run (``core.run_swf``: N workflows x 3 no-op steps, same store, same
processes and threads), then M pre-created instances of each shape run by ``Runner``
processes (``dags=registry``), timed from the barrier until the parent sees M COMPLETED.
``vs step`` is nodes/s divided by that steps/s: 1.0 means a DAG node costs what a
state-machine step costs. Join latency is read from the log afterwards: the join's
``NODE_STARTED`` time minus the latest branch ``NODE_COMPLETED`` time, per fan-out
instance; its ``NODE_DISPATCHED`` is in that branch's own commit. Postgres stamps events
with their transaction's start, SQLite with the writer's clock. Nothing here asserts a timing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from statemachine_wf.dag import DagBuilder, DagDefinition, Registry
from statemachine_wf.definition.events import Ev

from . import core, targets
from .workload import ROW

WIDTH = 100
DEPTH = 100
SHAPES = ("fanout", "chain")
"""The shapes a run times by default; ``slowfan`` only when asked for (``--shapes``)."""
ALL_SHAPES = (*SHAPES, "slowfan")
SLOW_WIDTH = 64
SLOW_SECONDS = 0.2

registry = Registry()


@registry.function("noop", inline=True)
def noop() -> int:
    """On the worker's thread with no timeout, as a state-machine step's action runs."""
    return 1


@registry.function("noop_pooled")
def noop_pooled() -> int:
    """On the runner's pool, under the default 30 s timeout (``--pooled``)."""
    return 1


@registry.function("slow", inline=True)
def slow() -> int:
    """A node that keeps its worker ``SLOW_SECONDS`` (the ``slowfan`` shape)."""
    time.sleep(SLOW_SECONDS)
    return 1


def fanout(width: int = WIDTH, function: str = "noop") -> DagDefinition:
    b = DagBuilder("bench_fanout")
    b.node("s", "start")
    b.node("join", "python", function=function)
    b.node("e", "end")
    for i in range(width):
        b.node(f"b{i}", "python", function=function)
        b.chain("s", f"b{i}", "join")
    b.edge("join", "e")
    return b.build()


def slowfan(width: int = SLOW_WIDTH) -> DagDefinition:
    """Two fan-outs of ``slow`` in a row (``j1`` joins the first, ``join`` the second)."""
    b = DagBuilder("bench_slowfan")
    b.node("s", "start")
    b.node("j1", "python", function="noop")
    b.node("join", "python", function="noop")
    b.node("e", "end")
    for i in range(width):
        b.node(f"a{i}", "python", function="slow")
        b.chain("s", f"a{i}", "j1")
        b.node(f"b{i}", "python", function="slow")
        b.chain("j1", f"b{i}", "join")
    b.edge("join", "e")
    return b.build()


def chain(depth: int = DEPTH, function: str = "noop") -> DagDefinition:
    b = DagBuilder("bench_chain")
    b.node("s", "start")
    names = [f"c{i}" for i in range(depth)]
    for name in names:
        b.node(name, "python", function=function)
    b.node("e", "end")
    b.chain("s", *names, "e")
    return b.build()


def definition(shape: str, function: str = "noop") -> DagDefinition:
    if shape == "slowfan":
        return slowfan()
    return fanout(function=function) if shape == "fanout" else chain(function=function)


def node_count(shape: str) -> int:
    if shape == "slowfan":
        return 2 * SLOW_WIDTH + 4
    return WIDTH + 3 if shape == "fanout" else DEPTH + 2


def instance_count(s: Settings, shape: str) -> int:
    return 1 if shape == "slowfan" else s.instances


@dataclass
class Settings:
    instances: int = 10
    """Instances of each shape per configuration."""
    steps_n: int = 1000
    """Workflows of the state-machine run (x 3 steps)."""
    stores: tuple[str, ...] = ("sqlite", "pg")
    procs: tuple[int, ...] = (1, 4)
    shapes: tuple[str, ...] = SHAPES
    """``fanout``, ``chain``, ``slowfan`` (one instance: its seconds are the figure)."""
    pg_concurrency: int = 8
    sqlite_concurrency: int = 4
    dsn: str = field(default_factory=core.pg_dsn)
    timeout: float = 600.0
    tmp: str = ""
    count: bool = False
    """Count each runner process's statements (bench/statements.py), summed a row."""
    dag_sticky: float | None = None
    """The DAG runners' PostgreSQL stores' ``dag_sticky`` (None: the library's default)."""
    runner_connections: int = 0
    """The PostgreSQL runners' ``runner_connections`` (0: the library's default)."""
    dag_connections: int = 0
    """The DAG runners' stores' ``dag_connections`` (0, the default: DAG commits wait for
    the ``pool_size`` connections with every other call)."""
    pooled: bool = False
    """Nodes call ``noop_pooled`` (the runner's pool, a 30 s timeout) instead of the inline
    ``noop``: what every sync node function cost before ``inline=True`` existed."""

    @classmethod
    def quick(cls) -> Settings:
        return cls(instances=4, steps_n=200)

    def core(self) -> core.Settings:
        return core.Settings(
            n=self.steps_n,
            pg_concurrency=self.pg_concurrency,
            sqlite_concurrency=self.sqlite_concurrency,
            dsn=self.dsn,
            timeout=self.timeout,
            tmp=self.tmp,
            count=self.count,
            runner_connections=self.runner_connections,
        )


@dataclass
class Row:
    name: str
    store: str
    procs: int
    shape: str  # "steps" for the state-machine run
    units: int  # nodes (or steps) executed
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def rate(self) -> float:
        return self.units / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_ms(self) -> str:
        """Client (+ postgres backend) CPU per node or step."""
        if "client_cpu" not in self.extra or not self.units:
            return ""
        text = f"{1000 * self.extra['client_cpu'] / self.units:.2f}"
        if self.store == "pg":
            text += f"+{1000 * self.extra['pg_cpu'] / self.units:.2f}"
        return text


# -- the DAG runs --------------------------------------------------------------------------
def dag_runner_child(spec: dict[str, Any], barrier: Any, stop: Any) -> dict[str, Any]:
    from statemachine_wf.runtime.runner import Runner, RunnerOptions

    spec = dict(spec, app=f"swfbench-{os.getpid()}")
    store = core.open_store(spec)
    store.migrate()
    runner = Runner(
        store, [], dags=registry, options=RunnerOptions(concurrency=spec["concurrency"])
    )
    core.warm_pool(store, spec["concurrency"] + 2, dags=True)
    counted = None
    if spec.get("count"):
        from .statements import _Counted

        counted = _Counted(store)
    barrier.wait(timeout=180)
    return core.measured(spec, runner, store, stop, counted, start=True)


def precreate(spec: dict[str, Any], shape: str, n: int, function: str = "noop") -> list[str]:
    from statemachine_wf.dag import DagClient

    store = core.open_store(spec)
    client = DagClient(store)
    graph = definition(shape, function)
    ids = [client.start(graph) for _ in range(n)]
    store.close()
    return ids


def join_latencies(spec: dict[str, Any], ids: list[str]) -> list[float]:
    """Seconds from the last branch's NODE_COMPLETED to the join's NODE_STARTED.

    The join's NODE_DISPATCHED is in the last branch's own commit (the same instant), so
    the figure is how long a dispatched join waits for a worker to claim it.
    """
    store = core.open_store(spec)
    out = []
    try:
        for iid in ids:
            events = store.events(iid)
            done = [
                e.created_at
                for e in events
                if e.event_type == "NODE_COMPLETED" and e.node and e.node.startswith("b")
            ]
            joined = [
                e.created_at for e in events if e.event_type == "NODE_STARTED" and e.node == "join"
            ]
            if done and joined:
                out.append(joined[0] - max(done))
    finally:
        store.close()
    return out


def stage_seconds(spec: dict[str, Any], iid: str) -> tuple[float, float]:
    """A ``slowfan`` instance's two stages: from the node before each fan-out completing
    (its commit dispatches the branches) to the fan-out's join starting."""
    store = core.open_store(spec)
    try:
        at = {(e.event_type, e.node): e.created_at for e in store.events(iid)}
    finally:
        store.close()
    done, started = Ev.NODE_COMPLETED, Ev.NODE_STARTED
    return at[started, "j1"] - at[done, "s"], at[started, "join"] - at[done, "j1"]


def run_dag(s: Settings, store: str, procs: int, shape: str) -> Row:
    cs = s.core()
    spec = core._spec(cs, store, f"dag_{shape}_{procs}p")
    spec["concurrency"] = s.pg_concurrency if store == "pg" else s.sqlite_concurrency
    spec["dag_connections"] = s.dag_connections
    if s.dag_sticky is not None:
        spec["dag_sticky"] = s.dag_sticky
    core.fresh_store(spec)
    instances = instance_count(s, shape)
    try:
        ids = precreate(spec, shape, instances, "noop_pooled" if s.pooled else "noop")
        with core.watcher(spec) as count:
            elapsed, outs = core.run_group(
                dag_runner_child,
                [dict(spec) for _ in range(procs)],
                poll=count,
                expect=instances,
                timeout=s.timeout,
            )
        extra: dict[str, Any] = dict(outs[-1], concurrency=spec["concurrency"])
        if s.count:
            extra["counts"] = core._summed([o.get("counts", {}) for o in outs])
        if shape == "slowfan":
            extra["stages"] = stage_seconds(spec, ids[0])
        if shape == "fanout":
            lat = join_latencies(spec, ids)
            extra.update(
                join_p50_ms=1000 * core._pct(lat, 50),
                join_p99_ms=1000 * core._pct(lat, 99),
                join_samples=len(lat),
            )
        return Row(
            f"dag {shape} {store} {procs}p",
            store,
            procs,
            shape,
            instances * node_count(shape),
            elapsed,
            extra=extra,
        )
    finally:
        core.drop_store(spec)


def run_steps(s: Settings, store: str, procs: int) -> Row:
    r = core.run_swf(s.core(), store, procs)
    return Row(
        f"state machine {store} {procs}p",
        store,
        procs,
        "steps",
        r.workflows * core.STEPS,
        r.seconds,
        extra=r.extra,
        error=r.error,
    )


def run_row(s: Settings, store: str, procs: int) -> Row:
    """The chain's shape as a state machine: ``s.instances`` pre-created workflows of
    ``workload.ROW`` steps in a row (``StepsInARow``), so a chain node is also compared
    with a step at the same concurrency (a few instances, each one unit at a time), where
    ``run_steps`` has a thousand workflows to group."""
    cs = s.core()
    spec = core._spec(cs, store, f"row_{procs}p")
    spec["concurrency"] = s.pg_concurrency if store == "pg" else s.sqlite_concurrency
    spec["workflow"] = "row"
    core.fresh_store(spec)
    try:
        core.precreate(spec, s.instances)
        with core.watcher(spec) as count:
            elapsed, outs = core.run_group(
                core.runner_child,
                [dict(spec) for _ in range(procs)],
                poll=count,
                expect=s.instances,
                timeout=s.timeout,
                ends_counted=True,
            )
        extra: dict[str, Any] = dict(outs[-1], concurrency=spec["concurrency"])
        if s.count:
            extra["counts"] = core._summed([o.get("counts", {}) for o in outs])
        name = f"steps in a row {store} {procs}p"
        return Row(name, store, procs, "row", s.instances * ROW, elapsed, extra)
    finally:
        core.drop_store(spec)


def run(s: Settings, log: Callable[[str], None]) -> list[Row]:
    own_tmp = not s.tmp
    if own_tmp:
        s.tmp = tempfile.mkdtemp(prefix="swfbench-dag-")
    rows: list[Row] = []
    try:
        for store in s.stores:
            for procs in s.procs:
                jobs: list[tuple[str, Callable[[], Row]]] = [
                    (f"steps {store} {procs}p", partial(run_steps, s, store, procs))
                ]
                if "chain" in s.shapes:
                    jobs.append((f"row {store} {procs}p", partial(run_row, s, store, procs)))
                for shape in s.shapes:
                    job = partial(run_dag, s, store, procs, shape)
                    jobs.append((f"{shape} {store} {procs}p", job))
                for label, run_one in jobs:
                    log(f"-- {label} ...")
                    t = time.perf_counter()
                    try:
                        row = run_one()
                    except Exception as exc:  # a failed configuration is reported, not fatal
                        msg = str(exc).strip().splitlines()
                        row = Row(label, store, procs, "?", 0, 0.0, error=msg[-1] if msg else "")
                    log(f"   {label}: {row.rate:.0f}/s ({time.perf_counter() - t:.1f} s wall)")
                    rows.append(row)
    finally:
        if own_tmp:
            shutil.rmtree(s.tmp, ignore_errors=True)
    return rows


def counts_report(rows: list[Row]) -> str:
    """Per node (per step for the state-machine rows), each counted row's statements and
    their server CPU a call, then the empty claims, wake-ups and sleeps (``--count``)."""
    results = [
        core.Result(r.name, r.store, "swf", r.procs, r.units, r.seconds, extra=r.extra)
        for r in rows
        if r.extra.get("counts")
    ]
    return core.counts_report(results).replace("per workflow:", "per node or step:")


def table(rows: list[Row], s: Settings) -> str:
    head = (
        f"{'configuration':<28} {'rate':>12} {'vs step':>8} {'vs row':>7} {'cpu ms/unit':>12}"
        f" {'join p50/p99 ms':>16} {'busy':>5}"
    )
    lines = [head, "-" * len(head)]
    steps: dict[tuple[str, int], Row] = {}
    in_a_row = {(r.store, r.procs): r for r in rows if r.shape == "row" and not r.error}
    for r in rows:
        if r.error:
            lines.append(f"{r.name:<28} ERROR: {r.error}")
            continue
        if r.shape == "steps":
            steps[(r.store, r.procs)] = r
        base = steps.get((r.store, r.procs))
        unit = "steps/s" if r.shape in ("steps", "row") else "nodes/s"
        ratio = f"{r.rate / base.rate:.2f}" if base and r.shape != "steps" else ""
        row = in_a_row.get((r.store, r.procs))
        vs_row = f"{r.rate / row.rate:.2f}" if row and r.shape == "chain" else ""
        if r.shape == "slowfan":  # not a rate to compare: each fan-out's seconds
            ratio = "{:.2f}+{:.2f}s".format(*r.extra["stages"])
        join = ""
        if "join_p50_ms" in r.extra:
            join = f"{r.extra['join_p50_ms']:.1f}/{r.extra['join_p99_ms']:.1f}"
        busy = f"{100 * r.extra['busy']:.0f}%" if "busy" in r.extra else ""
        lines.append(
            f"{r.name:<28} {r.rate:>6.0f} {unit:<5} {ratio:>8} {vs_row:>7} {r.cpu_ms:>12}"
            f" {join:>16} {busy:>5}"
        )
    lines.append("")
    sticky = "the default (1 s)" if s.dag_sticky is None else f"{s.dag_sticky} s"
    lines.append(
        f"{s.instances} instances per shape (fanout: 1 -> {WIDTH} -> join -> end, "
        f"{node_count('fanout')} nodes; chain: {DEPTH} in a row, {node_count('chain')} nodes; "
        f"slowfan: one instance, 1 -> {SLOW_WIDTH} nodes of {SLOW_SECONDS} s -> join -> "
        f"{SLOW_WIDTH} more -> join -> end, each fan-out's seconds in the 'vs step' column); "
        f"state machine: {s.steps_n} workflows x {core.STEPS} steps; steps in a row (with "
        f"the chain): {s.instances} workflows x {ROW} steps. Node function: "
        + ("noop_pooled (the runner's pool, 30 s timeout)" if s.pooled else "noop, inline")
        + f". DAG runners' dag_connections: {s.dag_connections}; dag_sticky: {sticky}.\n"
        f"Threads per runner process: pg {s.pg_concurrency}, sqlite {s.sqlite_concurrency}; "
        f"cpus={os.cpu_count()}. vs step: nodes/s over the state-machine steps/s of the same "
        "store and process count; vs row: the chain's nodes/s over the steps in a row's."
        "\ncpu ms/unit: runner processes (+ their postgres backends) "
        "CPU per node or step; busy: whole-machine CPU during the run, other tenants included."
    )
    lines.append("")
    lines.append(
        targets.render("The performance issue's DAG target, this run:", targets.dag_verdicts(rows))
    )
    return "\n".join(lines)
