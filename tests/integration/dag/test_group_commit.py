"""Group commit of a fan-out's branches (runtime/dag_group.py), on both stores with a real
runner: branches of one instance that finish while another of the runner's threads
commits are committed together, in one statement, each of their workers leased its next
branch in it; every branch completes once and the join runs once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from statemachine_wf import Runner, RunnerOptions, Status
from statemachine_wf.core.store import DagApplied, DagCommit, Store
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition, Registry
from statemachine_wf.definition.events import Ev
from statemachine_wf.runtime.dag_batch import BUDGET

WORKERS = 4


class SlowFirstCommit:
    """The real store; the first commit of a branch waits ``hold`` seconds first (while
    the other workers finish theirs and queue), and each commit is recorded: the nodes
    it completed, the siblings asked for, the tasks it leased."""

    def __init__(self, store: Store, hold: float = 0.3) -> None:
        self.store = store
        self.hold = hold
        self.commits: list[tuple[list[str], int, int]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def dag_commit(self, commit: DagCommit, **kw: Any) -> DagApplied:
        d = commit.decision
        branch = d.done is not None and d.done.startswith("b")
        with self._lock:
            first = branch and self.hold > 0
            if first:
                self.hold, hold = 0.0, self.hold
        if first:
            time.sleep(hold)
        applied = self.store.dag_commit(commit, **kw)
        done = [n for n in (d.done, *d.also_done) if n is not None]
        leased = len([t for t in (applied.task, *applied.more) if t is not None])
        with self._lock:
            self.commits.append((done, kw.get("siblings", 1), leased))
        return applied


def fan(width: int) -> tuple[DagDefinition, Registry]:
    """s -> b0..b<width-1> -> e; each branch waits for the others of its wave of
    WORKERS, so that they finish together."""
    registry = Registry()
    barrier = threading.Barrier(WORKERS)

    @registry.function("meet")
    def meet(i: int) -> int:
        try:
            barrier.wait(timeout=5)
        except threading.BrokenBarrierError:
            barrier.reset()  # a short last wave: go on alone
        # Past dag_batch.BUDGET, the last to reach the barrier included: each worker's
        # commit takes one branch, not a run of them (test_branch_runs.py).
        time.sleep(2 * BUDGET)
        return i

    b = DagBuilder("grouped_fan")
    b.node("s", "start")
    b.node("e", "end", outputs={"n": "{{ctx.b0}}"})
    for i in range(width):
        b.node(f"b{i}", "python", function="meet", args={"i": i})
        b.chain("s", f"b{i}", "e")
    return b.build(), registry


def run(
    store: SlowFirstCommit,
    definition: DagDefinition,
    registry: Registry,
    workers: int = WORKERS,
    output: dict[str, Any] | None = None,
) -> list[Any]:
    """Run one instance of ``definition`` to its end on a runner of ``workers``; its
    history (its ``output`` checked, when given)."""
    client = DagClient(store.store)
    iid = client.start(definition, {})
    runner = Runner(
        store, [], dags=registry, options=RunnerOptions(concurrency=workers, idle_poll=0.2)
    )
    runner.start()
    try:
        record = client.wait(iid, timeout=60)
    finally:
        runner.stop(timeout=10)
    assert record.status == Status.COMPLETED
    if output is not None:
        assert client.output(iid) == output
    return client.history(iid)


def once_each(history: list[Any], width: int) -> None:
    nodes = ["s", *(f"b{i}" for i in range(width)), "e"]
    for event in (Ev.NODE_COMPLETED, Ev.NODE_STARTED):
        counted = Counter(e.node for e in history if e.event_type == event)
        assert counted == dict.fromkeys(nodes, 1), event


def test_branches_finishing_together_commit_in_one_statement(store: Store) -> None:
    definition, registry = fan(WORKERS)
    slow = SlowFirstCommit(store)
    history = run(slow, definition, registry)
    once_each(history, WORKERS)
    branch_commits = [done for done, _, _ in slow.commits if done[0].startswith("b")]
    # The first waited; the three others queued meanwhile and went in one statement,
    # whose last completion dispatched the join (handed to its worker: e ran once).
    assert sorted(len(done) for done in branch_commits) == [1, WORKERS - 1]
    assert store.dag_group_most >= WORKERS
    assert [e.node for e in history if e.event_type == Ev.NODE_COMPLETED][-1] == "e"


def test_a_group_leases_the_next_branch_to_each_of_its_workers(store: Store) -> None:
    width = 3 * WORKERS
    definition, registry = fan(width)
    slow = SlowFirstCommit(store)
    history = run(slow, definition, registry)
    once_each(history, width)
    groups = [(done, asked, leased) for done, asked, leased in slow.commits if len(done) > 1]
    assert groups, slow.commits
    # The first wave's group asked a branch for each of its workers and got them all
    # (more branches were due than it had workers).
    done, asked, leased = groups[0]
    assert (asked, leased) == (len(done), len(done))
    assert all(n.startswith("b") for n in done)
