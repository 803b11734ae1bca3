"""A node whose commit dispatches one node due now hands it to the same worker: the chain
runs with one claim (the start node's), and a runner stopping in between releases the
handed node for whoever runs next instead of running it."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from statemachine_wf import Runner, RunnerOptions, Status
from statemachine_wf.core.store import Claim, InstanceRecord, Store
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition, Registry
from statemachine_wf.definition.events import Ev

from . import helpers as h


class CountingClaims:
    """The real store; the DAG claims that came back with work, counted."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.claimed: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def dag_claim(self, **kwargs: Any) -> list[Claim]:
        claims = self.store.dag_claim(**kwargs)
        self.claimed += [c.task.slot for c in claims]
        return claims


def run_to_end(store: Any, registry: Registry, client: DagClient, iid: str) -> InstanceRecord:
    """A runner of ``registry`` on ``store`` until instance ``iid`` has ended."""
    runner = Runner(store, [], dags=registry, options=RunnerOptions(concurrency=2, idle_poll=0.2))
    runner.start()
    try:
        return client.wait(iid, timeout=30)
    finally:
        runner.stop(timeout=10)


def test_a_chain_runs_on_one_claim_each_node_started_once(store: Store) -> None:
    counting = CountingClaims(store)
    client = DagClient(store)
    iid = client.start(h.linear(6), {"x": 1})
    record = run_to_end(counting, h.registry, client, iid)
    assert record.status == Status.COMPLETED
    assert record.progress == {"output": {"result": 7}}
    assert counting.claimed == ["s"]  # n0..n5 and e were handed over, none claimed
    history = client.history(iid)
    started = Counter(e.node for e in history if e.event_type == Ev.NODE_STARTED)
    assert started == dict.fromkeys(["s", *(f"n{i}" for i in range(6)), "e"], 1)
    # Each start follows its dispatch in the log, as a claim's would.
    order = [(e.event_type, e.node) for e in history if e.node == "n3"]
    assert order[:2] == [(Ev.NODE_DISPATCHED, "n3"), (Ev.NODE_STARTED, "n3")]


def test_a_runner_stopping_releases_the_handed_node_and_the_next_runs_it(store: Store) -> None:
    inside, stop_sent = threading.Event(), threading.Event()
    registry = Registry()

    @registry.function("hold")
    def hold() -> str:
        inside.set()
        stop_sent.wait(10)  # the runner is stopping while this node finishes
        return "held"

    @registry.function("after")
    def after() -> str:
        return "after"

    b = DagBuilder("hand_off_stop")
    b.node("s", "start")
    b.node("a", "python", function="hold")
    b.node("b", "python", function="after")
    b.node("e", "end", outputs={"b": "{{ctx.b}}"})
    b.chain("s", "a", "b", "e")
    definition: DagDefinition = b.build()
    client = DagClient(store)
    iid = client.start(definition, {})
    first = Runner(store, [], dags=registry, options=RunnerOptions(concurrency=1, idle_poll=0.2))
    first.start()
    assert inside.wait(10)
    stopping = threading.Thread(target=first.stop, kwargs={"timeout": 10})
    stopping.start()
    while not first._stopping.is_set():
        threading.Event().wait(0.005)
    stop_sent.set()
    stopping.join(15)
    # a's commit handed b to the stopping worker, which released it unrun: due, unleased,
    # its first try counted (NODE_STARTED written), as after a crash.
    history = client.history(iid)
    assert [e.node for e in history if e.event_type == Ev.NODE_COMPLETED] == ["s", "a"]
    assert [(e.node, e.attempt) for e in history if e.event_type == Ev.NODE_STARTED][-1] == (
        "b",
        1,
    )
    task = store.task(iid, "b")
    assert task is not None
    assert not task.leased
    record = run_to_end(store, registry, client, iid)
    assert record.status == Status.COMPLETED
    assert record.progress == {"output": {"b": "after"}}
    tries = [(e.node, e.attempt) for e in client.history(iid) if e.event_type == Ev.NODE_STARTED]
    assert tries.count(("b", 2)) == 1


def test_a_fan_out_runs_its_branches_on_the_workers_already_in_it(store: Store) -> None:
    """A branch's commit takes the next due branch of its instance for the same worker
    (dag_commit(take="sibling")): the branches need no claim each, and each runs exactly once."""
    counting = CountingClaims(store)
    client = DagClient(store)
    iid = client.start(h.fan_out(12), {"x": 1})
    record = run_to_end(counting, h.registry, client, iid)
    assert record.status == Status.COMPLETED
    assert record.progress == {"output": {f"b{i}": 1 + i for i in range(12)}}
    branches = [c for c in counting.claimed if c.startswith("b")]
    # Claimed: about one branch per worker (two), the others taken by branch commits. Not
    # exactly: until migration 018 an idle worker's claim running while a commit held the
    # instance row left the task rows its walk passed locked to the end of its statement,
    # so on PostgreSQL that commit's sibling take skipped them and its worker claimed the
    # next branch instead (seen once in a full run; test_claim_locks.py). Timing still
    # decides who takes which branch: the bound is what the sibling take must save, most
    # of the twelve claims.
    assert len(branches) <= 6
    history = client.history(iid)
    started = Counter(e.node for e in history if e.event_type == Ev.NODE_STARTED)
    assert started == dict.fromkeys(["s", *(f"b{i}" for i in range(12)), "e"], 1)
