"""A group commit (``ports.DagRuns.dag_commit`` of a decision with ``also_done``), on SQLite
and PostgreSQL: several completions of one instance, decided in turn
(``core.dag_group.decide``) and merged, in one commit that deletes each completed node's
task and leases the next due branch to each of the group's workers (or a run of them to
one worker). Both stores carry groups (``dag_group_most`` 32; SQLite since session 62),
and refuse a larger one, writing nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from statemachine_wf.core import dag_interpret as interpret
from statemachine_wf.core.dag_group import decide, merge
from statemachine_wf.core.store import Claim, DagCommit, Store
from statemachine_wf.definition.dag_models import check
from statemachine_wf.definition.events import Ev
from tests.integration.dag.helpers import fan_out

from . import test_dag_runs as runs

FAN = fan_out(5)  # s -> b0..b4 -> e
GRAPH = check(FAN)


def branches(store: Store, n: int) -> tuple[str, list[Claim]]:
    """An instance whose start has run, and ``n`` of its branches claimed by "w"."""
    iid = runs.start(store, name="fan_out", definition=FAN)[0]
    [first] = store.dag_claim(worker="w", types=[FAN.type], lease=300)
    store.dag_apply(runs.completion(store, first, {"x": 1}, GRAPH))
    claims = store.dag_claim(worker="w", types=[FAN.type], lease=300, limit=n)
    assert len(claims) == n
    return iid, claims


def grouped(store: Store, iid: str, claims: list[Claim]) -> DagCommit:
    """The runner's group: each completion decided on the view with the ones before it."""
    snap = store.dag_snapshot(iid)
    assert snap is not None
    view = interpret.LogView.of(snap.events)

    def make(node: str) -> Any:
        def made(slots: tuple[str, ...], v: interpret.LogView) -> interpret.DagDecision | None:
            return interpret.node_finished(
                GRAPH,
                v,
                node,
                v.run(node),
                interpret.NodeOutcome({"n": node}),
                attempt=1,
                status=snap.instance.status,
                open_slots=slots,
            )

        return made

    items = [(c.task.slot, make(c.task.slot)) for c in claims]
    group = decide(items, snap.open_slots, view, 32)
    assert [node for node, _ in group] == [c.task.slot for c in claims]
    return DagCommit(iid, snap.instance.version, merge([d for _, d in group]), "w")


def test_a_group_commits_its_completions_and_takes_a_branch_for_each_worker(
    store: Store,
) -> None:
    iid, claims = branches(store, 2)
    done = {c.task.slot for c in claims}
    commit = grouped(store, iid, claims)
    assert commit.decision.done in done
    assert set(commit.decision.also_done) == done - {commit.decision.done}
    applied = store.dag_commit(
        commit, take="sibling", lease=300, incarnation="host:1:abc", siblings=2
    )
    assert applied.version == commit.version + 1
    assert len(applied.seqs) == 2
    taken = [applied.task, *applied.more]
    assert all(t is not None for t in taken)
    slots = {t.slot for t in taken if t is not None}
    assert len(slots) == 2
    assert not slots & done
    tokens = {t.lease_token for t in taken if t is not None}
    assert len(tokens) == 2
    assert all(str(token).startswith("host:1:abc/") for token in tokens)
    snap = store.dag_snapshot(iid)
    assert snap is not None
    assert not done & set(snap.open_slots)  # each completed node's task gone
    events = store.events(iid)
    completed = [e.node for e in events if e.event_type == Ev.NODE_COMPLETED]
    assert completed[-2:] == [c.task.slot for c in claims]  # in the group's order
    for slot in slots:
        started = [e for e in events if e.event_type == Ev.NODE_STARTED and e.node == slot]
        assert [e.attempt for e in started] == [1]
        stored = store.task(iid, slot)
        assert stored is not None
        assert (stored.lease_owner, stored.attempt) == ("w", 1)
        assert stored.lease_token in tokens
    # The fifth branch is still due for a claim; the taken ones are not.
    [last] = store.dag_claim(worker="w2", types=[FAN.type], lease=300)
    assert last.task.slot not in slots | done
    assert store.dag_claim(worker="w2", types=[FAN.type], lease=300) == []


def test_a_group_takes_no_more_branches_than_are_due(store: Store) -> None:
    iid, claims = branches(store, 4)
    commit = grouped(store, iid, claims)
    applied = store.dag_commit(commit, take="sibling", lease=300, siblings=4)
    # One branch was left: the first worker gets it, the others claim.
    assert applied.task is not None
    assert applied.more == ()
    snap = store.dag_snapshot(iid)
    assert snap is not None
    assert set(snap.open_slots) == {applied.task.slot}


def test_a_lone_commit_takes_a_run_of_branches_for_its_worker(store: Store) -> None:
    # runtime/dag_batch.py: one worker's commit takes several due branches, each leased
    # under a token of its own with its NODE_STARTED written, as a claim would.
    iid, claims = branches(store, 1)
    commit = runs.completion(store, claims[0], {}, GRAPH)
    applied = store.dag_commit(
        commit, take="sibling", lease=300, incarnation="host:1:abc", siblings=3
    )
    taken = [t for t in (applied.task, *applied.more) if t is not None]
    assert len(taken) == 3
    slots = {t.slot for t in taken}
    assert len(slots) == 3
    assert claims[0].task.slot not in slots
    assert len({t.lease_token for t in taken}) == 3
    events = store.events(iid)
    for slot in slots:
        started = [e for e in events if e.event_type == Ev.NODE_STARTED and e.node == slot]
        assert [e.attempt for e in started] == [1]
    # One branch of five is left due (one done, three taken).
    [left] = store.dag_claim(worker="w2", types=[FAN.type], lease=300)
    assert left.task.slot not in slots | {claims[0].task.slot}


def test_a_group_larger_than_the_store_carries_is_refused(store: Store) -> None:
    iid, claims = branches(store, 2)
    commit = grouped(store, iid, claims)
    too_many = tuple(f"x{i}" for i in range(store.dag_group_most))
    big = DagCommit(
        iid, commit.version, replace(commit.decision, also_done=too_many), commit.worker
    )
    with pytest.raises(ValueError, match=f"{store.dag_group_most + 1} completions"):
        store.dag_commit(big)
    snap = store.dag_snapshot(iid)
    assert snap is not None
    assert snap.instance.version == commit.version  # nothing written


def test_more_siblings_than_a_group_may_carry_are_refused(store: Store) -> None:
    iid, claims = branches(store, 1)
    commit = runs.completion(store, claims[0], {}, GRAPH)
    too_many = store.dag_group_most + 1
    with pytest.raises(ValueError, match=f"{too_many} siblings"):
        store.dag_commit(commit, take="sibling", lease=300, siblings=too_many)
    snap = store.dag_snapshot(iid)
    assert snap is not None
    assert snap.instance.version == commit.version
