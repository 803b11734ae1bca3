"""What one ``dag_apply`` writes besides the instance row and its events, on both stores:
the node tasks it adds, finishes or reschedules, and the dead letter of a decision that
gives up. Decisions are built directly (``interpret.DagDecision``)."""

from __future__ import annotations

import time

from statemachine_wf import Status
from statemachine_wf.core.dag_interpret import DagDecision, NodeTask, TaskRetry
from statemachine_wf.core.store import DagCommit, Store

from .test_dag_runs import DAG_TYPE, claim_node, start


def commit(store: Store, instance_id: str, decision: DagDecision, worker: str = "w") -> int:
    rec = store.get(instance_id)
    assert rec is not None
    return store.dag_apply(DagCommit(instance_id, rec.version, decision, worker))


def test_a_commit_adds_node_tasks_and_settles_the_done_one(store: Store) -> None:
    iid, _ = start(store)
    claim_node(store, "s")
    dispatch = (NodeTask("a", 0.0, 0), NodeTask("b", 3600.0, 2))
    commit(store, iid, DagDecision(dispatch=dispatch, done="s"))
    assert store.task(iid, "s") is None
    a, b = store.task(iid, "a"), store.task(iid, "b")
    assert a is not None
    assert b is not None
    assert (a.attempt, b.attempt, a.kind, a.type) == (0, 2, "dag", DAG_TYPE)
    assert a.due_at <= time.time() < b.due_at
    assert 3500 < b.due_at - time.time() <= 3600


def test_a_retry_reschedules_only_a_task_the_worker_holds(store: Store) -> None:
    iid, _ = start(store)
    claim_node(store, "s")
    commit(store, iid, DagDecision(retry=TaskRetry("s", 600.0, 3)), worker="someone-else")
    task = store.task(iid, "s")
    assert task is not None
    assert (task.lease_owner, task.failures) == ("w", 0)  # not theirs: left alone
    commit(store, iid, DagDecision(retry=TaskRetry("s", 600.0, 3)))
    task = store.task(iid, "s")
    assert task is not None
    assert (task.lease_owner, task.failures, task.in_flight) == (None, 3, False)
    assert 500 < task.due_at - time.time() <= 600


def test_a_commit_that_gives_up_finishes_every_task_and_writes_its_dead_letter(
    store: Store,
) -> None:
    iid, _ = start(store)
    claim_node(store, "s")
    commit(store, iid, DagDecision(dispatch=(NodeTask("a"), NodeTask("b"))))
    error = {"code": "exhausted", "message": "no more tries"}
    decision = DagDecision(status=Status.FAILED, error=error, finish=True, dead_letter="gave up")
    commit(store, iid, decision)
    assert [store.task(iid, slot) for slot in ("s", "a", "b")] == [None, None, None]
    rec = store.get(iid)
    assert rec is not None
    assert (rec.status, rec.error) == (Status.FAILED, error)
    [letter] = store.dead_letters()
    assert (letter["instance_id"], letter["reason"], letter["worker"]) == (iid, "gave up", "w")
    envelope = letter["envelope"]
    assert (envelope["instance_id"], envelope["type"], envelope["input"]) == (
        iid,
        DAG_TYPE,
        {"x": 1},
    )
    assert (envelope["status"], envelope["error"]) == ("FAILED", error)
    # The same envelope on both stores (the same SQL piece as a state machine's):
    # a DAG has no one current step.
    assert envelope["kind"] == "dag"
    assert envelope["step"] is None
