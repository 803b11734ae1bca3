"""``dag_commit(take="sibling")`` (``ports.DagRuns``), on SQLite and PostgreSQL: a commit that hands
nothing over takes another due node task of its instance for the committing worker, as
``dag_claim`` would have taken it, so a fan-out's branches need no claim each."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from statemachine_wf.core import dag_interpret as interpret
from statemachine_wf.core.store import Claim, DagCommit, Store
from statemachine_wf.definition.dag_models import check
from statemachine_wf.definition.events import Ev
from tests.integration.dag.helpers import fan_out

from . import test_dag_runs as runs

FAN = fan_out(3)  # s -> b0, b1, b2 -> e
GRAPH = check(FAN)


def start(store: Store) -> str:
    return runs.start(store, name="fan_out", definition=FAN)[0]


def completion(store: Store, claim: Claim, output: Any) -> DagCommit:
    return runs.completion(store, claim, output, GRAPH)


def claim(store: Store, worker: str = "w") -> Claim:
    [got] = store.dag_claim(worker=worker, types=[FAN.type], lease=300)
    return got


def test_a_branch_commit_takes_the_next_due_branch_as_a_claim_would(store: Store) -> None:
    iid = start(store)
    first_node = claim(store)
    assert first_node.task.slot == "s"
    # The start's commit dispatches the three branches; none was due before it, so it
    # takes none of them (not one it adds), and all three stay due for claims.
    fan = completion(store, first_node, {"x": 1})
    assert interpret.takes_sibling(fan.decision)
    assert store.dag_commit(fan, take="sibling", lease=300).task is None
    first = claim(store)
    done = completion(store, first, 1)
    assert done.decision.dispatch == ()  # the join waits for the other branches
    applied = store.dag_commit(done, take="sibling", lease=300, incarnation="host:1:abc")
    version, task = applied.version, applied.task
    assert version == done.version + 1
    assert task is not None
    # What dag_claim leases: another branch of this instance, its try counted, this
    # worker's lease under a fresh token of the incarnation.
    assert task.instance_id == iid
    assert task.slot in {"b0", "b1", "b2"} - {first.task.slot}
    assert (task.lease_owner, task.leased, task.in_flight, task.attempt) == ("w", True, True, 1)
    assert task.lease_token is not None
    assert task.lease_token.startswith("host:1:abc/")
    assert task.lease_token != first.task.lease_token
    stored = store.task(iid, task.slot)
    assert stored is not None
    assert (stored.lease_owner, stored.lease_token, stored.attempt) == ("w", task.lease_token, 1)
    # Its NODE_STARTED is in the same commit (in either order with the commit's own
    # events: two nodes, as when a claim and a commit interleave), once.
    events = store.events(iid)
    assert {(e.event_type, e.node) for e in events[-2:]} == {
        (Ev.NODE_COMPLETED, first.task.slot),
        (Ev.NODE_STARTED, task.slot),
    }
    started = [e for e in events if e.event_type == Ev.NODE_STARTED and e.node == task.slot]
    assert [(e.attempt, e.payload) for e in started] == [(1, {"failures": 0})]
    # A claim now gets the last branch only, and then nothing.
    last = claim(store, "w2")
    assert last.task.slot not in {first.task.slot, task.slot}
    assert store.dag_claim(worker="w2", types=[FAN.type], lease=300) == []
    # Fenced like a claim: released by its token, the branch is due again, its next try.
    store.release(worker="w", instance_ids=[iid], token=task.lease_token)
    again = claim(store, "w2")
    assert (again.task.slot, again.task.attempt) == (task.slot, 2)


def test_a_commit_takes_no_task_of_another_instance(store: Store) -> None:
    mine, other = start(store), start(store)
    [a, b] = store.dag_claim(worker="w", types=[FAN.type], lease=300, limit=2)
    [own] = [c for c in (a, b) if c.instance.id == mine]
    [theirs] = [c for c in (a, b) if c.instance.id == other]
    store.dag_apply(completion(store, theirs, {"x": 1}))  # other's branches due
    task = store.dag_commit(completion(store, own, {}), take="sibling", lease=300).task
    assert task is None
    assert {store.task(other, f"b{i}").lease_owner for i in range(3)} == {None}  # type: ignore[union-attr]


def test_a_sibling_take_refuses_a_commit_that_may_not_take_one(store: Store) -> None:
    iid = start(store)
    commit = completion(store, claim(store), {"x": 1})
    one = replace(commit.decision, dispatch=commit.decision.dispatch[:1])  # a hand-off
    ended = replace(commit.decision, finish=True)
    for decision in (one, ended):
        assert not interpret.takes_sibling(decision)
        with pytest.raises(ValueError, match=r"dag_commit\(take='sibling'\) takes a node task"):
            store.dag_commit(replace(commit, decision=decision), take="sibling", lease=300)
    snap = store.dag_snapshot(iid)
    assert snap is not None
    assert snap.instance.version == commit.version  # nothing written
