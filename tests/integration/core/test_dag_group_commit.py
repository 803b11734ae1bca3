"""PostgreSQL group commit of DAG node commits: the plain commits of several instances in
one statement (``dag_group_head``, ``group_events``, ``group_live``, ``dag_group_tail``;
stores/_pggroup.py; docs/architecture.md, "Group commit on PostgreSQL").

Each commit keeps its own CAS and its own outcome, and writes what it writes alone: its
events, its done task gone, its dispatched tasks (the handed one leased to its worker),
its notifications. The contract suite also runs a store that sends every plain DAG
commit this way (tests/contract/conftest.py, ``group_min=1``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import psycopg
import pytest

from statemachine_wf import ConcurrencyConflict, Status
from statemachine_wf.core import dag_interpret as interpret
from statemachine_wf.core.dag_interpret import DagDecision, NodeTask, TaskRetry
from statemachine_wf.core.store import DagCommit
from statemachine_wf.definition.events import Ev
from statemachine_wf.stores._pggroup import _dag_groupable, _DagItem
from statemachine_wf.stores.postgres import PostgresStore
from tests.contract.test_dag_runs import DAG_TYPE, claim_node, completion, start
from tests.integration.core.group_threads import hold_first_statement, run_at_once
from tests.plugins.stores import PG_DSN

TAKE: dict[str, Any] = {"take": "handed", "lease": 300.0, "incarnation": "host:1:abc"}


@pytest.fixture
def store(pg_store: PostgresStore) -> PostgresStore:
    return pg_store  # group_min=2: the default


def handing(store: PostgresStore) -> DagCommit:
    """A new linear DAG (s -> n0 -> e) whose start node completes, handing n0 over."""
    start(store)
    commit = completion(store, claim_node(store, "s"), {"out": 1})
    handed = interpret.hand_off(commit.decision)
    assert handed is not None
    return replace(commit, decision=handed)


class _Captured(Exception):
    pass


def captured(store: PostgresStore, commit: DagCommit, **take: Any) -> _DagItem:
    """The item ``store.dag_commit(commit, **take)`` queues for the group, unsent."""
    items: list[_DagItem] = []

    class Catch:
        def submit(self, key: str, item: _DagItem) -> None:
            items.append(item)
            raise _Captured

    real = store._dag_commits
    store._dag_commits = Catch()  # type: ignore[assignment]
    try:
        with pytest.raises(_Captured):
            store.dag_commit(commit, **take)
    finally:
        store._dag_commits = real
    [item] = items
    return item


def slots(store: PostgresStore, instance_id: str) -> list[str]:
    """The instance's open node tasks, by slot."""
    snap = store.dag_snapshot(instance_id)
    assert snap is not None
    return list(snap.open_slots)


def snapshot(store: PostgresStore, instance_id: str) -> tuple[Any, ...]:
    return store.get(instance_id), store.events(instance_id), slots(store, instance_id)


def tail(store: PostgresStore, instance_id: str, n: int) -> list[tuple[Any, ...]]:
    return [(e.event_type, e.node, e.attempt) for e in store.events(instance_id)][-n:]


def test_one_statement_commits_each_dag_commit_on_its_own_version(
    store: PostgresStore,
) -> None:
    a, b, c = (handing(store) for _ in range(3))
    stale = replace(b, version=b.version - 1)
    before = snapshot(store, b.instance_id)
    items = [captured(store, x, **TAKE) for x in (a, stale, c)]

    outcomes = store._send_dag_commits(items)

    assert isinstance(outcomes[1], ConcurrencyConflict)
    assert snapshot(store, b.instance_id) == before  # nothing of the stale one
    for commit, row in ((a, outcomes[0]), (c, outcomes[2])):
        assert not isinstance(row, BaseException), row
        iid = commit.instance_id
        assert row["version"] == commit.version + 1 == store.get(iid).version  # type: ignore[union-attr]
        # Its events, in the decision's order, their seqs read back; the handed node's
        # NODE_STARTED last, as dag_claim would have written it.
        events = store.events(iid)
        new = events[-len(commit.decision.events) :]
        assert row["seqs"] == [e.seq for e in new]
        assert [(e.event_type, e.node) for e in new] == [
            (e.event_type, e.node) for e in commit.decision.events
        ]
        assert tail(store, iid, 2) == [(Ev.NODE_DISPATCHED, "n0", 1), (Ev.NODE_STARTED, "n0", 1)]
        # The done task gone; the handed one leased to the worker under a fresh token.
        assert slots(store, iid) == ["n0"]
        taken = row["taken"]
        assert (taken["slot"], taken["attempt"], taken["lease_owner"]) == ("n0", 1, "w")
        assert (taken["in_flight"], taken["lease_token"].startswith("host:1:abc")) == (True, True)
        task = store.task(iid, "n0")
        assert task is not None
        assert (task.lease_owner, task.lease_token) == ("w", taken["lease_token"])
    # Nobody else can claim the handed nodes; the stale one's start node is still held.
    assert store.dag_claim(worker="w2", types=[DAG_TYPE], lease=300) == []


def test_a_grouped_commit_writes_what_the_same_commit_alone_writes(
    store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    grouped, alone = handing(store), handing(store)
    store._send_dag_commits([captured(store, grouped, **TAKE), captured(store, handing(store))])
    lone = PostgresStore(pg_dsn, schema=pg_schema, group_min=0)
    try:
        applied = lone.dag_commit(alone, **TAKE)
    finally:
        lone.close()

    def written(iid: str) -> tuple[Any, ...]:
        rec = store.get(iid)
        task = store.task(iid, "n0")
        assert rec is not None
        assert task is not None
        events = [(e.event_type, e.node, e.attempt, e.payload, e.worker) for e in store.events(iid)]
        return (
            rec.status,
            rec.version,
            events,
            slots(store, iid),
            (task.attempt, task.lease_owner, task.in_flight, task.kind, task.type),
        )

    assert written(grouped.instance_id) == written(alone.instance_id)
    assert applied.task is not None


def test_a_commit_that_ends_its_instance_shares_the_statement(store: PostgresStore) -> None:
    ending = handing(store)
    store.dag_commit(ending, take="handed", lease=300.0)
    # n0 completes; then e, the end node, completes and finishes the instance.
    claim = store.dag_claim(worker="w", types=[DAG_TYPE], lease=300)
    assert claim == []  # n0 is held (handed)
    other = handing(store)
    snap = store.dag_snapshot(ending.instance_id)
    assert snap is not None
    finish = DagCommit(
        ending.instance_id,
        snap.instance.version,
        DagDecision(status=Status.COMPLETED, finish=True, output={"done": True}),
        "w",
    )

    outcomes = store._send_dag_commits([captured(store, finish), captured(store, other, **TAKE)])

    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes
    rec = store.get(ending.instance_id)
    assert rec is not None
    assert (rec.status, rec.progress) == (Status.COMPLETED, {"done": True})
    assert slots(store, ending.instance_id) == []  # every task of the instance gone
    assert slots(store, other.instance_id) == ["n0"]


def test_a_dispatched_node_still_open_fails_its_own_commit_and_the_others_commit(
    store: PostgresStore,
) -> None:
    a, c = handing(store), handing(store)
    version = store.dag_commit(a, **TAKE).version  # n0 now open, leased
    again = DagCommit(a.instance_id, version, DagDecision(dispatch=(NodeTask("n0"),)), "w")
    before = snapshot(store, a.instance_id)

    outcomes = store._send_dag_commits([captured(store, again), captured(store, c, **TAKE)])

    # The (instance, slot) key refuses the statement; then each commit goes alone.
    assert isinstance(outcomes[0], ConcurrencyConflict)
    assert snapshot(store, a.instance_id) == before
    assert not isinstance(outcomes[1], BaseException), outcomes[1]
    assert store.get(c.instance_id).version == c.version + 1  # type: ignore[union-attr]


def test_a_commit_that_makes_work_for_others_notifies_the_runners(
    store: PostgresStore,
) -> None:
    a, b = handing(store), handing(store)
    fan = DagCommit(
        a.instance_id,
        a.version,
        DagDecision(dispatch=(NodeTask("x"), NodeTask("y")), done="s"),
        "w",
    )
    with psycopg.connect(PG_DSN, autocommit=True) as listener:
        listener.execute(f'LISTEN "{store.channel}"')
        store._send_dag_commits([captured(store, fan), captured(store, b, **TAKE)])
        got = [n.payload for n in listener.notifies(timeout=0.3)]
    # Two tasks due for anyone: told once (the handed commit tells nobody).
    assert got == [DAG_TYPE]
    assert sorted(slots(store, a.instance_id)) == ["x", "y"]


def test_only_plain_commits_are_grouped(store: PostgresStore) -> None:
    plain = handing(store)
    params = {"sib_token": None}
    assert _dag_groupable(plain, params)
    assert not _dag_groupable(plain, {"sib_token": "t"})  # takes a sibling
    assert not _dag_groupable(replace(plain, blockers=("n1",)), params)  # a vouched head
    for decision in (
        replace(plain.decision, dead_letter="gave up"),
        replace(plain.decision, retry=TaskRetry("s", 1.0, 1)),
        replace(plain.decision, also_done=("n1",)),
    ):
        assert not _dag_groupable(replace(plain, decision=decision), params)


def test_threads_that_commit_nodes_at_once_share_statements(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = 6
    commits = [handing(store) for _ in range(threads)]
    sent = hold_first_statement(monkeypatch, store._dag_commits, threads)

    def commit(c: DagCommit) -> None:
        applied = store.dag_commit(c, **TAKE)
        assert applied.task is not None
        assert applied.version == c.version + 1

    assert run_at_once(commit, commits) == []
    assert sent == [1, threads - 1]  # the first alone, everyone else behind it
    for c in commits:
        assert tail(store, c.instance_id, 1) == [(Ev.NODE_STARTED, "n0", 1)]


def test_group_min_zero_sends_every_dag_commit_alone(pg_dsn: str, pg_schema: str) -> None:
    s = PostgresStore(pg_dsn, schema=pg_schema, group_min=0)
    try:
        s.migrate()
        assert s._dag_commits is None
        commit = handing(s)
        applied = s.dag_commit(commit, **TAKE)
        assert applied.version == commit.version + 1
        assert applied.task is not None
        assert applied.task.slot == "n0"
    finally:
        s.close()
