"""``dag_commit`` (``ports.DagRuns``), on SQLite and PostgreSQL: a committed DAG decision
comes back with the seqs its events took in the log, in the decision's order, whatever
else the commit wrote (a sibling's NODE_STARTED, a hand-off's task) and whoever wrote
between two commits (a claim's NODE_STARTED). A runner folds its own commits into its
cached view with them instead of reading the log back."""

from __future__ import annotations

from dataclasses import replace

import pytest

from statemachine_wf.core import dag_interpret as interpret
from statemachine_wf.core.store import DagApplied, Store
from statemachine_wf.definition.events import EventRecord, NewEvent
from statemachine_wf.errors import ConcurrencyConflict

from . import test_dag_runs as runs
from . import test_dag_siblings as fan


def _at(store: Store, iid: str, applied: DagApplied) -> list[EventRecord]:
    by_seq = {e.seq: e for e in store.events(iid)}
    return [by_seq[s] for s in applied.seqs]


def _same(written: list[EventRecord], events: tuple[NewEvent, ...]) -> bool:
    return [(e.event_type, e.node, e.attempt, e.payload) for e in written] == [
        (e.event_type, e.node, e.attempt, e.payload) for e in events
    ]


def test_the_seqs_are_the_decisions_events_in_order(store: Store) -> None:
    iid = fan.start(store)
    commit = fan.completion(store, fan.claim(store), {"x": 1})  # s: three dispatches
    applied = store.dag_commit(commit)
    assert applied.version == commit.version + 1
    assert applied.task is None
    assert len(applied.seqs) == len(commit.decision.events) == 4
    assert list(applied.seqs) == sorted(applied.seqs)
    assert _same(_at(store, iid, applied), commit.decision.events)


def test_a_sibling_take_returns_the_decisions_seqs_not_its_started(store: Store) -> None:
    iid = fan.start(store)
    store.dag_commit(fan.completion(store, fan.claim(store), {"x": 1}))
    first = fan.claim(store)
    other = fan.claim(store, "w2")  # a claim between: its NODE_STARTED is no seq of ours
    done = fan.completion(store, first, 1)
    applied = store.dag_commit(done, take="sibling", lease=300)
    assert applied.task is not None
    assert applied.task.slot not in {first.task.slot, other.task.slot}
    assert _same(_at(store, iid, applied), done.decision.events)
    # The sibling's NODE_STARTED was written by the same commit, after the events.
    [started] = [
        e
        for e in store.events(iid)
        if e.node == applied.task.slot and e.event_type == "NODE_STARTED"
    ]
    assert started.seq not in applied.seqs


def test_a_hand_off_returns_its_started_among_the_seqs(store: Store) -> None:
    iid, _ = runs.start(store)
    commit = runs.completion(store, runs.claim_node(store, "s"), None)
    handed = interpret.hand_off(commit.decision)
    assert handed is not None
    applied = store.dag_commit(replace(commit, decision=handed), take="handed", lease=300)
    assert applied.task is not None
    assert len(applied.seqs) == len(handed.events)
    assert _same(_at(store, iid, applied), handed.events)


def test_a_refused_take_or_a_lost_cas_writes_nothing(store: Store) -> None:
    iid = fan.start(store)
    commit = fan.completion(store, fan.claim(store), {"x": 1})
    before = store.events(iid)
    one = replace(commit.decision, dispatch=commit.decision.dispatch[:1])
    with pytest.raises(ValueError, match=r"dag_commit\(take='handed'\) hands off exactly one"):
        store.dag_commit(commit, take="handed", lease=300)
    with pytest.raises(ValueError, match=r"dag_commit\(take='sibling'\) takes a node task"):
        store.dag_commit(replace(commit, decision=one), take="sibling", lease=300)
    with pytest.raises(ConcurrencyConflict):
        store.dag_commit(replace(commit, version=commit.version - 1))
    assert store.events(iid) == before
