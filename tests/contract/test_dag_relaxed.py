"""A DAG completion its blockers vouch for (``DagCommit.blockers``), on SQLite and
PostgreSQL: it commits on a later version than the one it was decided on while the
instance runs, its node's task is still there and one of the blockers' tasks is open; when
none of that holds any more it is a lost CAS and nothing is written.

This is what lets a fan-out's branches run in several runner processes without each
commit losing its CAS to another process's (``dag_vouch.blockers`` says why an open
input of the join is enough; ``tests/integration/dag/test_relaxed_race.py`` pins the
PostgreSQL case where the commit waits for the row of the commit that settled the
blocker).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from statemachine_wf import ConcurrencyConflict, Status
from statemachine_wf.core import dag_interpret as interpret
from statemachine_wf.core import dag_vouch
from statemachine_wf.core.store import Claim, DagCommit, Store
from statemachine_wf.definition.events import Ev
from statemachine_wf.runtime.operations import cancel

from . import test_dag_siblings as sib


def branches(store: Store) -> tuple[str, dict[str, Claim]]:
    """A started fan-out (s -> b0, b1, b2 -> e) whose three branches are claimed."""
    iid = sib.start(store)
    first = sib.claim(store)
    store.dag_commit(sib.completion(store, first, {"x": 1}))
    claims = {c.task.slot: c for c in (sib.claim(store, f"w{i}") for i in range(3))}
    assert set(claims) == {"b0", "b1", "b2"}
    return iid, claims


def vouched(store: Store, claim: Claim) -> DagCommit:
    """``claim``'s completion with the blockers the interpreter names for it."""
    commit = sib.completion(store, claim, 1)
    snap = store.dag_snapshot(commit.instance_id)
    assert snap is not None
    view = interpret.LogView.of(snap.events)
    blockers = dag_vouch.blockers(sib.GRAPH, view, commit.decision, snap.open_slots)
    return replace(commit, blockers=blockers)


def written(store: Store, iid: str) -> tuple[int, int, list[str]]:
    """The instance's version, its number of events and its open node tasks."""
    snap = store.dag_snapshot(iid)
    assert snap is not None
    return snap.instance.version, len(snap.events), sorted(snap.open_slots)


def test_a_vouched_completion_commits_on_a_later_version(store: Store) -> None:
    iid, claims = branches(store)
    b0, b1 = vouched(store, claims["b0"]), vouched(store, claims["b1"])
    assert b0.version == b1.version
    assert set(b1.blockers) == {"b0", "b2"}  # the join's other inputs, both open
    assert store.dag_commit(replace(b0, blockers=())).version == b0.version + 1
    # Decided on the version b0's commit moved on; b2 is still open, so b1's completion
    # is what a fresh read would decide too (the join still waits): it commits.
    applied = store.dag_commit(b1)
    assert applied.version == b1.version + 2
    assert len(applied.seqs) == 1
    events = store.events(iid)
    done = [str(e.node) for e in events if e.event_type == Ev.NODE_COMPLETED]
    assert sorted(done) == ["b0", "b1", "s"]
    assert written(store, iid)[2] == ["b2"]


def test_a_completion_no_open_blocker_vouches_for_is_a_lost_cas(store: Store) -> None:
    iid, claims = branches(store)
    b0, b1, b2 = (vouched(store, claims[n]) for n in ("b0", "b1", "b2"))
    store.dag_commit(b0)
    store.dag_commit(b1)
    # b2 was decided when b0 and b1 were open; both are done now, so the join is ready
    # and "nothing to dispatch" is wrong: refused, nothing written.
    before = written(store, iid)
    with pytest.raises(ConcurrencyConflict):
        store.dag_commit(b2)
    assert written(store, iid) == before
    # Decided again on a fresh read, it dispatches the join.
    again = sib.completion(store, claims["b2"], 2)
    assert [t.node for t in again.decision.dispatch] == ["e"]
    store.dag_commit(again)
    assert written(store, iid)[2] == ["e"]


def test_a_completion_whose_own_task_went_is_a_lost_cas(store: Store) -> None:
    iid, claims = branches(store)
    b0 = vouched(store, claims["b0"])
    twice = replace(b0, version=b0.version)
    store.dag_commit(b0)
    # The same run's result again (a duplicate delivery decided on the old version): its
    # task is gone, so somebody settled the run, and the blockers do not vouch for that.
    before = written(store, iid)
    with pytest.raises(ConcurrencyConflict):
        store.dag_commit(twice)
    assert written(store, iid) == before


def test_a_completion_on_an_instance_that_stopped_running_is_a_lost_cas(store: Store) -> None:
    iid, claims = branches(store)
    b0 = vouched(store, claims["b0"])
    assert cancel(store, iid).status == Status.CANCELLED
    with pytest.raises(ConcurrencyConflict):
        store.dag_commit(b0)
    events = store.events(iid)
    assert [e.node for e in events if e.event_type == Ev.NODE_COMPLETED] == ["s"]


def test_without_blockers_a_later_version_is_a_lost_cas(store: Store) -> None:
    iid, claims = branches(store)
    b0, b1 = vouched(store, claims["b0"]), vouched(store, claims["b1"])
    store.dag_commit(b0)
    before = written(store, iid)
    with pytest.raises(ConcurrencyConflict):
        store.dag_commit(replace(b1, blockers=()))
    assert written(store, iid) == before
