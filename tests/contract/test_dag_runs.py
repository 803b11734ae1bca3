"""The DAG runs' contract (``ports.DagRuns``), on SQLite and PostgreSQL.

Decisions are the pure DAG core's (``dag.interpret``), committed as the executor commits
them: a node's ``NODE_COMPLETED`` and what it schedules, in one ``dag_apply``.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest

from statemachine_wf import ConcurrencyConflict, InvalidState, Status
from statemachine_wf.core import dag_interpret as interpret
from statemachine_wf.core.store import Claim, DagCommit, NewDagInstance, NewInstance, Store
from statemachine_wf.dag import DagDefinition
from statemachine_wf.definition.dag_models import check
from statemachine_wf.definition.events import Ev, NewEvent
from tests.integration.dag.helpers import linear

DEFINITION = linear(1)  # s -> n0 -> e
GRAPH = check(DEFINITION)
DAG_TYPE = DEFINITION.type


def start(
    store: Store,
    *,
    key: str | None = None,
    name: str = "linear",
    test: bool = False,
    definition: DagDefinition = DEFINITION,
) -> tuple[str, bool]:
    """``dag_create`` as ``DagClient`` calls it."""
    created = {"input": {"x": 1}, "dag": definition.dump(), "ref": {"name": name}}
    graph = check(definition)
    return store.dag_create(
        NewDagInstance(
            id=str(uuid.uuid4()),
            type=definition.type,
            input={"x": 1},
            start=graph.start,
            events=tuple(interpret.start_events(graph, created)),
            name=name,
            test=test,
            idempotency_key=key,
        )
    )


def completion(store: Store, claim: Claim, output: Any, graph: Any = GRAPH) -> DagCommit:
    """The executor's commit for ``claim``'s node completing with ``output``."""
    instance_id, node = claim.instance.id, claim.task.slot
    snap = store.dag_snapshot(instance_id)
    assert snap is not None
    view = interpret.LogView.of(snap.events)
    decision = interpret.node_finished(
        graph,
        view,
        node,
        view.run(node),
        interpret.NodeOutcome(output),
        attempt=1,
        status=snap.instance.status,
        open_slots=snap.open_slots,
    )
    assert decision is not None
    return DagCommit(instance_id, snap.instance.version, decision, "w")


def claim_node(store: Store, node: str) -> Claim:
    [claim] = store.dag_claim(worker="w", types=[DAG_TYPE], lease=300)
    assert claim.task.slot == node
    return claim


def test_dag_create_is_idempotent_on_the_key(store: Store) -> None:
    iid, created = start(store, key="dag-1")
    assert created
    assert start(store, key="dag-1") == (iid, False)
    snap = store.dag_snapshot(iid)
    assert snap is not None
    assert (snap.instance.kind, snap.instance.status) == ("dag", Status.RUNNING)
    assert [e.event_type for e in snap.events] == [Ev.CREATED, Ev.NODE_DISPATCHED]
    assert snap.open_slots == ("s",)
    assert store.count_instances() == 1


def test_dag_create_of_a_known_id_and_key_writes_nothing(store: Store) -> None:
    iid, _ = start(store, key="dag-1")
    created = {"input": {"x": 2}, "dag": DEFINITION.dump(), "ref": {"name": "linear"}}
    again = NewDagInstance(
        id=iid,
        type=DAG_TYPE,
        input={"x": 2},
        start=GRAPH.start,
        events=tuple(interpret.start_events(GRAPH, created)),
        name="linear",
        idempotency_key="dag-1",
    )
    assert store.dag_create(again) == (iid, False)  # the same id and key: a retry
    snap = store.dag_snapshot(iid)
    assert snap is not None
    assert [e.event_type for e in snap.events] == [Ev.CREATED, Ev.NODE_DISPATCHED]
    assert snap.open_slots == ("s",)
    assert snap.instance.input == {"x": 1}
    # A key a machine instance holds: its id back, and nothing of a DAG added to it.
    machine_id = str(uuid.uuid4())
    store.create(NewInstance(machine_id, "t.machine.v1", {}, "first", "machine", "m-1"))
    other = replace(again, id=machine_id, idempotency_key="m-1")
    assert store.dag_create(other) == (machine_id, False)
    assert store.task(machine_id, "s") is None
    assert [e.event_type for e in store.events(machine_id)] == [Ev.CREATED]
    assert store.count_instances() == 2


def test_dag_claim_leases_a_node_task_and_starts_it_once(store: Store) -> None:
    iid, _ = start(store)
    claim = claim_node(store, "s")
    assert claim.started
    assert (claim.task.kind, claim.task.attempt, claim.task.lease_owner) == ("dag", 1, "w")
    assert store.dag_claim(worker="w2", types=[DAG_TYPE], lease=300) == []
    assert store.claim(worker="w2", types=[DAG_TYPE], lease=300) == []  # not a machine task
    started = [e for e in store.events(iid) if e.event_type == Ev.NODE_STARTED]
    assert [(e.node, e.attempt, e.worker) for e in started] == [("s", 1, "w")]
    task = store.task(iid, "s")
    assert task is not None
    assert (task.lease_owner, task.leased) == ("w", True)


def test_dag_apply_obeys_the_same_cas(store: Store) -> None:
    iid, _ = start(store)
    commit = completion(store, claim_node(store, "s"), None)
    assert store.dag_apply(commit) == commit.version + 1
    before = store.dag_snapshot(iid)
    assert before is not None
    assert before.open_slots == ("n0",)
    with pytest.raises(ConcurrencyConflict):  # the same decision again: a stale version
        store.dag_apply(commit)
    assert store.dag_snapshot(iid) == before  # nothing written
    completions = [e for e in before.events if e.event_type == Ev.NODE_COMPLETED]
    assert [e.node for e in completions] == ["s"]


def test_dag_snapshot_reads_the_tail_after_a_seq(store: Store) -> None:
    iid, _ = start(store)
    claim_node(store, "s")
    full = store.dag_snapshot(iid)
    assert full is not None
    assert len(full.events) == 3
    tail = store.dag_snapshot(iid, after_seq=full.events[0].seq)
    assert tail is not None
    assert tail.events == full.events[1:]
    assert (tail.instance, tail.open_slots) == (full.instance, full.open_slots)
    empty = store.dag_snapshot(iid, after_seq=full.events[-1].seq)
    assert empty is not None
    assert empty.events == []
    assert store.dag_snapshot(str(uuid.uuid4())) is None


def test_a_dag_runs_to_completion_and_its_row_is_its_projection(store: Store) -> None:
    iid, _ = start(store)
    store.dag_apply(completion(store, claim_node(store, "s"), None))
    store.dag_apply(completion(store, claim_node(store, "n0"), 2))
    store.dag_apply(completion(store, claim_node(store, "e"), {"result": 2}))
    snap = store.dag_snapshot(iid)
    assert snap is not None
    assert snap.open_slots == ()
    rec = snap.instance
    assert rec.status == Status.COMPLETED
    assert rec.progress == {"output": {"result": 2}}
    assert rec.projection().comparable() == interpret.project(snap.events).comparable()
    assert store.dag_claim(worker="w", types=[DAG_TYPE], lease=300) == []
    assert not store.dag_record(iid, NewEvent(Ev.NODE_STARTED, "e", 2, {}), worker="w")


def test_dag_record_writes_a_node_event_once_per_run(store: Store) -> None:
    iid, _ = start(store)
    claim_node(store, "s")
    # A once-per-run event (the log's unique index: started, completed, failed, dispatched).
    done = NewEvent(Ev.NODE_COMPLETED, "s", 1, {"output": None, "handle": None})
    assert store.dag_record(iid, done, worker="w")
    assert not store.dag_record(iid, replace(done, payload={"output": 2}), worker="w2")
    recorded = [e for e in store.events(iid) if e.event_type == Ev.NODE_COMPLETED]
    assert [(e.worker, e.payload["output"]) for e in recorded] == [("w", None)]
    snap = store.dag_snapshot(iid)
    assert snap is not None
    store.dag_apply(DagCommit(iid, snap.instance.version, interpret.cancel(snap.open_slots), "ops"))
    assert not store.dag_record(iid, NewEvent(Ev.NODE_STARTED, "s", 2, {}), worker="w")
    cancelled = store.dag_snapshot(iid)
    assert cancelled is not None
    assert (cancelled.instance.status, cancelled.open_slots) == (Status.CANCELLED, ())


def test_saved_definitions_are_immutable_versions(store: Store) -> None:
    first, second = {"n": 1}, {"n": 2}
    assert store.dag_save("flow", first) == 1
    assert store.dag_save("flow", second) == 2
    assert store.dag_save("other", first) == 1
    assert store.dag_definition("flow") == (2, second)
    assert store.dag_definition("flow", 1) == (1, first)
    assert store.dag_definition("flow", 3) is None
    assert store.dag_definition("nope") is None
    assert store.dag_definitions() == [("flow", 2), ("other", 1)]
    used, _ = start(store, name="flow")
    trial, _ = start(store, name="flow", test=True)
    with pytest.raises(InvalidState):
        store.dag_delete("flow")
    assert store.dag_definition("flow") == (2, second)
    assert not store.dag_delete_test_run(used)  # not a test run
    assert store.dag_delete_test_run(trial)
    assert store.get(trial) is None
    assert store.dag_delete("flow", cascade=True) == 2
    assert store.get(used) is None
    assert store.dag_definitions() == [("other", 1)]


def test_children_are_the_instances_started_with_a_parent(store: Store) -> None:
    parent, _ = start(store)
    kids = [
        NewInstance(str(uuid.uuid4()), "c.child.v1", {}, "go", parent_id=parent, parent_node="n0")
        for _ in range(2)
    ]
    for kid in kids:
        store.create(kid)
    store.create(NewInstance(str(uuid.uuid4()), "c.child.v1", {}, "go"))  # an orphan
    children = store.children(parent)
    assert sorted(c.id for c in children) == sorted(k.id for k in kids)
    assert {(c.parent_id, c.parent_node) for c in children} == {(parent, "n0")}
    assert store.children(kids[0].id) == []


def test_a_node_claim_carries_its_lease_and_its_token_fences_the_hand_back(store: Store) -> None:
    iid, _ = start(store)
    claim = claim_node(store, "s")
    task = store.task(iid, "s")
    assert task is not None
    assert claim.task.leased
    assert claim.task.lease_token is not None
    assert claim.task.lease_token == task.lease_token
    # A hand-back is by token: another claim's token frees nothing, this one's frees it.
    store.release(worker="w", instance_ids=[iid], token=claim.task.lease_token + "-other")
    still = store.task(iid, "s")
    assert still is not None
    assert still.leased
    store.release(worker="w", instance_ids=[iid], token=claim.task.lease_token)
    freed = store.task(iid, "s")
    assert freed is not None
    assert not freed.leased


def test_dag_claim_says_whether_more_is_due_and_fences_each_claim_by_its_token(
    store: Store,
) -> None:
    first, _ = start(store)
    second, _ = start(store)
    [a] = store.dag_claim(worker="w", types=[DAG_TYPE], lease=300)
    assert a.more  # the other instance's node task is due too
    [b] = store.dag_claim(worker="w", types=[DAG_TYPE], lease=300)
    assert not b.more
    assert {a.instance.id, b.instance.id} == {first, second}
    assert a.task.lease_token is not None
    assert b.task.lease_token is not None
    assert a.task.lease_token != b.task.lease_token
    assert (a.task.attempt, a.task.in_flight, a.task.leased) == (1, True, True)
    started = [e for e in store.events(a.instance.id) if e.event_type == Ev.NODE_STARTED]
    assert [(e.node, e.attempt, e.payload) for e in started] == [("s", 1, {"failures": 0})]
    # A hand-back under a's token frees a's task only.
    store.release(worker="w", instance_ids=[a.instance.id, b.instance.id], token=a.task.lease_token)
    freed = store.task(a.instance.id, "s")
    held = store.task(b.instance.id, "s")
    assert freed is not None
    assert held is not None
    assert freed.lease_owner is None
    assert held.lease_owner == "w"
    assert store.dag_claim(worker="w", types=["t.other.v1"], lease=300) == []


def test_a_handed_take_hands_the_one_next_node_to_the_committing_worker(store: Store) -> None:
    iid, _ = start(store)
    commit = completion(store, claim_node(store, "s"), None)
    handed = interpret.hand_off(commit.decision)
    assert handed is not None
    applied = store.dag_commit(
        replace(commit, decision=handed), take="handed", lease=300, incarnation="host:1:abc"
    )
    version, task = applied.version, applied.task
    assert version == commit.version + 1
    assert task is not None
    # What dag_claim would have leased: the node's task, its try counted, this worker's
    # lease under a fresh token of the incarnation (the runner's heartbeat extends it).
    assert (task.instance_id, task.slot, task.kind, task.attempt) == (iid, "n0", "dag", 1)
    assert (task.lease_owner, task.leased, task.in_flight) == ("w", True, True)
    assert task.lease_token is not None
    assert task.lease_token.startswith("host:1:abc")
    assert store.task(iid, "n0") == replace(task, due_at=store.task(iid, "n0").due_at)  # type: ignore[union-attr]
    # Nobody else can claim it, and its NODE_STARTED follows the dispatch in the log.
    assert store.dag_claim(worker="w2", types=[DAG_TYPE], lease=300) == []
    tail = [(e.event_type, e.node, e.attempt) for e in store.events(iid)][-2:]
    assert tail == [(Ev.NODE_DISPATCHED, "n0", 1), (Ev.NODE_STARTED, "n0", 1)]
    # The lease is fenced like a claim's: released by its token, the node is due again.
    store.release(worker="w", instance_ids=[iid], token=task.lease_token)
    [again] = store.dag_claim(worker="w2", types=[DAG_TYPE], lease=300)
    assert (again.task.slot, again.task.attempt) == ("n0", 2)


def test_a_handed_take_refuses_a_decision_that_does_not_hand_one_node_over(
    store: Store,
) -> None:
    iid, _ = start(store)
    commit = completion(store, claim_node(store, "s"), None)
    two = replace(commit.decision, dispatch=commit.decision.dispatch * 2)
    later = replace(commit.decision, dispatch=(replace(commit.decision.dispatch[0], delay=5),))
    for decision in (two, later, replace(commit.decision, finish=True)):
        with pytest.raises(ValueError, match="exactly one node task due now"):
            store.dag_commit(replace(commit, decision=decision), take="handed", lease=300)
    assert store.dag_snapshot(iid).instance.version == commit.version  # type: ignore[union-attr]
    assert interpret.hand_off(two) is None
    assert interpret.hand_off(later) is None
