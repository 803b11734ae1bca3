"""A worker's run of a fan-out's branches (runtime/dag_batch.py), with a real runner: after
a quick branch (well inside ``BUDGET``), the worker's commit takes ``RUN`` due branches,
runs them one after another and commits their completions in one statement, which takes
its next run. On both stores. Every branch completes once, the join runs once, and what
the instance computed is whole."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from statemachine_wf import Runner, RunnerOptions, Status
from statemachine_wf.core.store import Store
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition, Registry
from statemachine_wf.definition.events import Ev
from statemachine_wf.runtime.dag_batch import BUDGET, RUN

from . import helpers as h
from .test_group_commit import SlowFirstCommit
from .test_group_commit import run as grouped_run

WIDTH = 24


def fan(width: int, *, pause: float = 0.0, fail: str = "") -> tuple[DagDefinition, Registry]:
    """s -> b0..b<width-1> -> join -> e; each branch returns its index (after ``pause``
    seconds); branch ``fail`` raises on its first try."""
    registry = Registry()
    tries: Counter[str] = Counter()

    @registry.function("branch", inline=True)
    def branch(i: int) -> int:
        if pause:
            time.sleep(pause)
        tries[f"b{i}"] += 1
        if f"b{i}" == fail and tries[fail] == 1:
            raise ConnectionError(f"b{i} fails once")
        return i

    @registry.function("total", inline=True)
    def total(**ctx: Any) -> int:
        return sum(int(ctx[f"b{i}"]) for i in range(width))

    b = DagBuilder("branch_runs")
    b.node("s", "start")
    b.node(
        "join",
        "python",
        function="total",
        args={f"b{i}": f"{{{{ctx.b{i}}}}}" for i in range(width)},
    )
    b.node("e", "end", outputs={"total": "{{ctx.join}}"})
    for i in range(width):
        h.py(b, f"b{i}", "branch", i=i, retry=h.FAST_RETRY)
        b.chain("s", f"b{i}", "join")
    b.edge("join", "e")
    return b.build(), registry


def run(store: SlowFirstCommit, definition: DagDefinition, registry: Registry) -> list[Any]:
    # One worker: each branch after the first comes through its own commits, not a claim.
    return grouped_run(store, definition, registry, 1, {"total": sum(range(WIDTH))})


def counted(history: list[Any], event: str) -> Counter[str]:
    return Counter(e.node for e in history if e.event_type == event)


def each_once(history: list[Any]) -> None:
    nodes = ["s", *(f"b{i}" for i in range(WIDTH)), "join", "e"]
    assert counted(history, Ev.NODE_COMPLETED) == dict.fromkeys(nodes, 1)


def test_quick_branches_run_in_runs_committed_together(store: Store) -> None:
    definition, registry = fan(WIDTH)
    recorded = SlowFirstCommit(store, hold=0.0)
    history = run(recorded, definition, registry)
    each_once(history)
    assert counted(history, Ev.NODE_STARTED) == dict.fromkeys(
        ["s", *(f"b{i}" for i in range(WIDTH)), "join", "e"], 1
    )
    branch_commits = [c for c in recorded.commits if c[0][0].startswith("b")]
    # A run: RUN branches taken by one commit, then their RUN completions in one.
    assert any(asked == RUN and leased == RUN for _, asked, leased in branch_commits)
    assert any(len(done) == RUN for done, _, _ in branch_commits)
    # Far fewer statements than branches: about one a run.
    assert len(branch_commits) <= WIDTH // 2


def test_slow_branches_take_one_branch_a_commit(store: Store) -> None:
    definition, registry = fan(WIDTH, pause=2 * BUDGET)
    recorded = SlowFirstCommit(store, hold=0.0)
    history = run(recorded, definition, registry)
    each_once(history)
    branch_commits = [c for c in recorded.commits if c[0][0].startswith("b")]
    assert all(asked <= 1 and len(done) == 1 for done, asked, _ in branch_commits)
    assert len(branch_commits) == WIDTH


def test_a_branch_failing_in_a_run_is_retried_and_the_run_commits(store: Store) -> None:
    # b3 is in the first run (b1.. after b0 was claimed): its failure commits on its
    # own (a retry), the run's other completions together; b3 runs again later.
    definition, registry = fan(WIDTH, fail="b3")
    recorded = SlowFirstCommit(store, hold=0.0)
    history = run(recorded, definition, registry)
    each_once(history)
    started = counted(history, Ev.NODE_STARTED)
    assert started["b3"] == 2
    assert counted(history, Ev.NODE_FAILED)["b3"] <= 1
    assert all(started[f"b{i}"] == 1 for i in range(WIDTH) if i != 3)


@pytest.mark.parametrize("runs", [True, False], ids=["quick", "slow"])
def test_a_runner_stopped_mid_fan_out_loses_no_branch(store: Store, runs: bool) -> None:
    """Stop (not a crash) while runs are under way: what ran is committed, the branches
    taken and not run are given back (the heartbeat would keep their leases), and a second
    runner finishes the instance at once, each branch completed once."""
    definition, registry = fan(WIDTH, pause=0.0 if runs else 2 * BUDGET)
    client = DagClient(store)
    iid = client.start(definition, {})
    first = Runner(store, [], dags=registry, options=RunnerOptions(concurrency=2))
    first.start()
    deadline = time.monotonic() + 30
    while counted(client.history(iid), Ev.NODE_COMPLETED).total() < WIDTH // 3:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    first.stop(timeout=10)
    second = Runner(store, [], dags=registry, options=RunnerOptions(concurrency=2))
    second.start()
    try:
        # Well inside the lease (30 s): nothing was left leased to the stopped runner.
        record = client.wait(iid, timeout=10)
    finally:
        second.stop(timeout=10)
    assert record.status == Status.COMPLETED
    history = client.history(iid)
    each_once(history)
    assert client.output(iid) == {"total": sum(range(WIDTH))}
