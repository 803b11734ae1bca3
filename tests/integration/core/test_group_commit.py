"""PostgreSQL group commit: Continue decisions of several threads in one statement
(``apply_continues``; docs/architecture.md, "Group commit on PostgreSQL").

Each decision keeps its own CAS and its own outcome: a stale one, a duplicate event or a
value no store keeps fails that decision alone, and the others commit as if sent alone.
The contract suite also runs a store that sends every Continue this way
(tests/contract/conftest.py).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest

from statemachine_wf import ConcurrencyConflict, DataRejected, Status
from statemachine_wf.core import decide
from statemachine_wf.core.decide import Continue, Decision, Finish, KeepTask
from statemachine_wf.core.fold import fold
from statemachine_wf.core.store import Claim, Commit
from statemachine_wf.core.waits import NewSignal
from statemachine_wf.definition.events import Ev, NewEvent
from statemachine_wf.stores._pggroup import _Item
from statemachine_wf.stores.postgres import PostgresStore
from tests.contract.helpers import TYPE, claim_one, started
from tests.integration.core.group_threads import hold_first_statement, run_at_once
from tests.integration.core.test_store_contract import new
from tests.plugins.stores import PG_DSN
from tests.unit.core.workflows import ThreeSteps

SPEC = ThreeSteps.spec()


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[PostgresStore]:
    s = PostgresStore(pg_dsn, schema=pg_schema)  # group_min=2: the default
    s.migrate()
    yield s
    s.close()


def moved_on(claim: Claim) -> Commit:
    """The claimed instance's first step done: on to "second" (a Continue)."""
    state = claim.instance.projection(in_flight=True)
    d = decide.success(SPEC, state, "first", 1, "second", {"b": claim.instance.id})
    assert isinstance(d.task, Continue)
    return Commit(claim.instance.id, claim.instance.version, d, "w")


def snapshot(store: PostgresStore, instance_id: str) -> tuple[Any, ...]:
    return store.get(instance_id), store.events(instance_id), store.task(instance_id)


def assert_committed(store: PostgresStore, commit: Commit, version: int) -> None:
    """The row, log and task a lone ``apply`` of ``commit`` would have left."""
    rec = store.get(commit.instance_id)
    assert rec is not None
    assert version == rec.version == commit.version + 1
    events = store.events(commit.instance_id)
    assert rec.projection().comparable() == fold(events).comparable()
    assert [(e.event_type, e.node, e.attempt) for e in events[-2:]] == [
        (Ev.STEP_COMPLETED, "first", 1),
        (Ev.STEP_STARTED, "second", 1),
    ]
    assert events[-1].seq > events[-2].seq
    assert rec.progress == {"b": commit.instance_id}
    task = store.task(commit.instance_id)
    assert task is not None
    assert (task.node, task.attempt, task.in_flight, task.lease_owner) == ("second", 1, True, "w")


def test_one_statement_commits_each_decision_on_its_own_version(store: PostgresStore) -> None:
    a, b, c = (moved_on(started(store)) for _ in range(3))
    stale = Commit(b.instance_id, b.version - 1, b.decision, "w")
    before = snapshot(store, b.instance_id)

    outcomes = store._send_continues([_item(store, x) for x in (a, stale, c)])

    assert isinstance(outcomes[1], ConcurrencyConflict)
    assert snapshot(store, b.instance_id) == before  # nothing of the stale one
    assert_committed(store, a, _version(outcomes[0]))
    assert_committed(store, c, _version(outcomes[2]))


def test_a_progress_save_shares_the_statement_and_keeps_its_task(store: PostgresStore) -> None:
    moving = moved_on(started(store))
    saving = started(store)
    state = saving.instance.projection(in_flight=True)
    save = decide.saved(state, "first", 1, {"b": "key-1"})  # what ctx.save() commits
    assert isinstance(save.task, KeepTask)
    kept = Commit(saving.instance.id, saving.instance.version, save, "w")
    task_before = store.task(saving.instance.id)

    outcomes = store._send_continues([_item(store, moving), _item(store, kept)])

    assert_committed(store, moving, _version(outcomes[0]))
    assert _version(outcomes[1]) == kept.version + 1
    rec = store.get(saving.instance.id)
    assert rec is not None
    assert rec.progress == {"b": "key-1"}
    assert rec.projection().comparable() == fold(store.events(rec.id)).comparable()
    assert store.events(rec.id)[-1].event_type == Ev.PROGRESS_SET
    assert store.task(saving.instance.id) == task_before  # node, lease, attempt as they were


def test_a_duplicate_event_fails_its_own_decision_and_the_others_commit(
    store: PostgresStore,
) -> None:
    a, b = moved_on(started(store)), moved_on(started(store))
    version = store.apply(b)
    # A decision on b's new version that writes its STEP_STARTED again: the unique index
    # refuses it, which fails the whole statement; then each is sent alone.
    again = b.decision.state
    twice = Decision((NewEvent(Ev.STEP_STARTED, "second", 1),), again, Continue("second", 1))
    dup = Commit(b.instance_id, version, twice, "w")
    before = snapshot(store, b.instance_id)

    outcomes = store._send_continues([_item(store, a), _item(store, dup)])

    assert isinstance(outcomes[1], ConcurrencyConflict)
    assert snapshot(store, b.instance_id) == before
    assert_committed(store, a, _version(outcomes[0]))


def test_a_value_no_store_keeps_is_refused_for_its_own_decision(store: PostgresStore) -> None:
    claim = started(store)
    state = claim.instance.projection(in_flight=True)
    # The decisions refuse such progress first; a row written by hand may hold it.
    poison = decide.start(dataclasses.replace(state, progress={"b": "a\x00b"}), "second")
    assert isinstance(poison.task, Continue)
    before = snapshot(store, claim.instance.id)
    with pytest.raises(DataRejected, match="NUL"):
        store.apply(Commit(claim.instance.id, claim.instance.version, poison, "w"))
    assert snapshot(store, claim.instance.id) == before


def test_threads_that_continue_at_once_share_statements(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads, rounds = 8, 15
    claims = [started(store) for _ in range(threads)]
    sent = hold_first_statement(monkeypatch, store._continues, threads)

    def run(claim: Claim) -> None:
        state, version = claim.instance.projection(in_flight=True), claim.instance.version
        for _ in range(rounds):
            d = decide.start(state, "first")  # a Continue: the next attempt's intent
            version = store.apply(Commit(claim.instance.id, version, d, "w"))
            state = d.state

    assert run_at_once(run, claims) == []
    assert sent[1] >= threads - 1  # everyone queued behind the first statement
    assert sum(sent) == threads * rounds  # every decision once
    for claim in claims:
        rec = store.get(claim.instance.id)
        assert rec is not None
        assert rec.version == claim.instance.version + rounds
        events = store.events(claim.instance.id)
        assert rec.projection().comparable() == fold(events).comparable()
        attempts = [e.attempt for e in events if e.event_type == Ev.STEP_STARTED]
        assert attempts == list(range(1, rounds + 2))  # the claim's, then one a decision


def test_a_watched_instance_in_a_group_is_notified_once_with_its_highest_seq(
    store: PostgresStore,
) -> None:
    a, b = moved_on(started(store)), moved_on(started(store))
    with psycopg.connect(PG_DSN, autocommit=True) as listener:
        listener.execute(f'LISTEN "{store.live_channel}"')
        import asyncio

        loop = asyncio.new_event_loop()
        sub = store.live_hub().subscribe(a.instance_id, loop)
        try:
            list(listener.notifies(timeout=0.2))  # nothing yet
            store._send_continues([_item(store, a), _item(store, b)])
            got = [n.payload for n in listener.notifies(timeout=0.3)]
        finally:
            sub.close()
            loop.close()
    assert got == [f"{a.instance_id} {store.events(a.instance_id)[-1].seq}"]


def ended(claim: Claim) -> Commit:
    """The claimed instance cancelled at once: a plain Finish."""
    d = decide.cancel(claim.instance.projection(in_flight=True), leased=False)
    assert isinstance(d.task, Finish)
    return Commit(claim.instance.id, claim.instance.version, d, "w")


def finishing(store: PostgresStore, commits: Sequence[Commit]) -> list[_Item]:
    """The finishes as the store queues them, each with the claim for worker "w"."""
    return [store._finish_item(c, (TYPE,), 300.0, "") for c in commits]


def claimed_ids(outcome: Any) -> list[str]:
    assert not isinstance(outcome, BaseException), outcome
    _version, rows = outcome
    assert rows is not None
    return [str(row["instance_id"]) for row, _raw, _signals in rows]


def test_finishes_sent_together_each_claim_one_task_and_never_their_own(
    store: PostgresStore,
) -> None:
    running = [started(store) for _ in range(4)]
    waiting = {new(store) for _ in range(3)}  # due: three claims for four finishes
    commits = [ended(c) for c in running]
    # One finish has lost its CAS: nothing of it is written, and no claim is made for it.
    commits[1] = Commit(commits[1].instance_id, commits[1].version - 1, commits[1].decision, "w")
    before = snapshot(store, commits[1].instance_id)

    outcomes = store._send_finishes(finishing(store, commits))

    assert isinstance(outcomes[1], ConcurrencyConflict)
    assert snapshot(store, commits[1].instance_id) == before
    taken = [claimed_ids(outcomes[n]) for n in (0, 2, 3)]
    assert sorted(len(t) for t in taken) == [1, 1, 1]  # one each, all there were
    assert {i for t in taken for i in t} == waiting
    for n in (0, 2, 3):
        rec = store.get(commits[n].instance_id)
        assert rec is not None
        assert rec.status == Status.CANCELLED
        assert rec.version == commits[n].version + 1 == outcomes[n][0]  # type: ignore[index]
        assert store.task(commits[n].instance_id) is None
        assert rec.projection().comparable() == fold(store.events(rec.id)).comparable()
    for iid in waiting:  # each claim started its instance's first step
        task = store.task(iid)
        assert task is not None
        assert (task.lease_owner, task.in_flight) == ("w", True)
        assert store.events(iid)[-1].event_type == Ev.STEP_STARTED


def test_a_grouped_finish_dead_letters_the_signals_its_instance_never_applied(
    store: PostgresStore,
) -> None:
    signalled = new(store)
    store.signal(NewSignal(signalled, "ping", {"n": 1}))
    first = claim_one(store)
    second = started(store)
    assert first.instance.id == signalled

    outcomes = store._send_finishes(finishing(store, [ended(first), ended(second)]))

    assert all(not isinstance(o, BaseException) for o in outcomes), outcomes
    assert store.signal_counts(instance_id=signalled)["dead"] == 1
    [letter] = store.dead_letters()
    assert letter["reason"] == "the instance ended before the signal was applied"
    assert letter["envelope"]["name"] == "ping"
    assert letter["worker"] == "w"


def test_finishes_that_make_a_task_due_claim_nothing_in_their_statement(
    store: PostgresStore,
) -> None:
    holder, other = started(store, type_="c.holder.v1"), started(store)
    waiter = new(store, delay=3600)  # parked on the lock: due only when woken
    store.acquire_lock("k", holder.instance.id)
    assert store.acquire_lock("k", waiter) == holder.instance.id

    outcomes = store._send_finishes(finishing(store, [ended(holder), ended(other)]))

    # The statement's snapshot does not hold the waiter's new due time: each worker claims
    # on its own (SqlStore.apply_and_claim), and sees it.
    assert [o[1] for o in outcomes] == [None, None]  # type: ignore[index]
    assert store.lock_holder("k") is None
    task = store.task(waiter)
    assert task is not None
    assert task.due_at <= time.time()


def test_group_min_zero_sends_every_decision_alone(pg_dsn: str, pg_schema: str) -> None:
    s = PostgresStore(pg_dsn, schema=pg_schema, group_min=0)
    try:
        s.migrate()
        assert s._continues is None
        commit = moved_on(started(s))
        assert s.apply(commit) == commit.version + 1
    finally:
        s.close()
    with pytest.raises(ValueError, match="group_min"):
        PostgresStore(pg_dsn, schema=pg_schema, group_min=-1)


def _item(store: PostgresStore, commit: Commit) -> _Item:
    return store._continue_item(commit)


def _version(outcome: int | BaseException) -> int:
    assert isinstance(outcome, int), outcome
    return outcome
