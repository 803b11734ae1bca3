"""The task queue's contract (``ports.TaskQueue``), on SQLite and PostgreSQL.

Leases are given explicitly: ``lease=0`` is a lease that has already run out (the task
is due again at once), 300 s one that cannot run out during a test.
"""

from __future__ import annotations

import threading
import time

import pytest

from statemachine_wf import ConcurrencyConflict, Status
from statemachine_wf.core import decide
from statemachine_wf.core.fold import fold
from statemachine_wf.core.store import Commit, Store
from statemachine_wf.definition.events import Ev
from statemachine_wf.stores import open_store
from tests.integration.core.test_store_contract import new
from tests.unit.core.workflows import ThreeSteps

from .helpers import TYPE, cancelled, claim_one, started


def test_a_claim_leases_one_due_task_and_a_second_claim_does_not_get_it(store: Store) -> None:
    iid = new(store)
    claims = store.claim(worker="w1", types=[TYPE], lease=300, limit=5, incarnation="inc-1")
    assert [c.instance.id for c in claims] == [iid]
    token = claims[0].task.lease_token
    assert token is not None
    assert token.startswith("inc-1/")
    assert store.claim(worker="w2", types=[TYPE], lease=300) == []
    assert store.claim_instance(iid, worker="w2", lease=300) is None
    task = store.task(iid)
    assert task is not None
    assert (task.lease_owner, task.lease_token, task.leased) == ("w1", token, True)


def test_claims_take_state_machine_tasks_of_their_types_when_due(store: Store) -> None:
    later = new(store, delay=3600)
    other = new(store, type_="c.other.v1")
    assert store.claim(worker="w", types=[TYPE, "c.nobody.v1"], lease=300) == []
    wait = store.next_due(types=[TYPE])
    assert wait is not None
    assert 3000 < wait <= 3600
    assert store.next_due(types=["c.other.v1"]) == 0
    assert store.next_due(types=["c.nobody.v1"]) is None
    assert store.next_due(types=[], dag_types=["c.other.v1"]) is None  # not a DAG task
    # A runner of one kind asks with the other kind's list empty: the same answers.
    assert store.next_due(types=["c.other.v1"], dag_types=[]) == 0
    machine_only = store.next_due(types=[TYPE], dag_types=[])
    assert machine_only is not None
    assert 3000 < machine_only <= 3600
    assert store.next_due(types=[], dag_types=[]) is None
    [claim] = store.claim(worker="w", types=["c.other.v1"], lease=300)
    assert claim.instance.id == other
    assert later not in {claim.instance.id}


def test_an_expired_lease_is_claimable_again_and_fences_the_old_holder(store: Store) -> None:
    iid = new(store)
    [old] = store.claim(worker="w1", types=[TYPE], lease=0, incarnation="old")  # run out
    [now] = store.claim(worker="w2", types=[TYPE], lease=300, incarnation="new")
    assert now.instance.id == iid
    assert not now.started  # the step was in flight: in doubt, the new holder decides
    assert now.task.in_flight
    assert now.instance.version > old.instance.version
    assert now.task.lease_token != old.task.lease_token
    # The old holder's heartbeat extends nothing, its hand-back releases nothing ...
    assert store.heartbeat(worker="w1", lease=300, incarnation="old") == 0
    assert store.heartbeat(worker="w1", lease=300) == 0
    store.release(worker="w1", instance_ids=[iid], token=old.task.lease_token)
    store.release(worker="w2", instance_ids=[iid], token=old.task.lease_token)
    task = store.task(iid)
    assert task is not None
    assert (task.lease_owner, task.lease_token, task.leased) == ("w2", now.task.lease_token, True)
    # ... and its decision loses the CAS.
    d = decide.saved(old.instance.projection(in_flight=True), "first", 1, {"late": True})
    with pytest.raises(ConcurrencyConflict):
        store.apply(Commit(iid, old.instance.version, d, "w1"))
    assert Ev.PROGRESS_SET not in [e.event_type for e in store.events(iid)]


def test_heartbeat_and_release_are_fenced_by_incarnation(store: Store) -> None:
    """Two runners with one worker id (twins) never extend or release each other's leases."""
    a = started(store, worker="node-1")
    b_id = new(store)
    b = store.claim_instance(b_id, worker="node-1", lease=300, incarnation="inc-b")
    assert b is not None
    store.release(worker="node-1", instance_ids=[a.instance.id])
    a2 = store.claim_instance(a.instance.id, worker="node-1", lease=300, incarnation="inc-a")
    assert a2 is not None
    assert sorted(store.lease_incarnations(worker="node-1")) == ["inc-a", "inc-b"]
    assert store.heartbeat(worker="node-1", lease=300, incarnation="inc-a") == 1
    assert store.heartbeat(worker="node-1", lease=300) == 2
    assert store.heartbeat(worker="node-2", lease=300) == 0
    store.release(worker="node-1", incarnation="inc-a")  # every lease of inc-a, no other
    assert store.lease_incarnations(worker="node-1") == ["inc-b"]
    assert store.claim_instance(b_id, worker="x", lease=300) is None
    taken = store.claim_instance(a.instance.id, worker="x", lease=300)
    assert taken is not None
    assert taken.task.in_flight  # a hand-back keeps the in-flight mark


def test_a_heartbeat_logs_only_a_claim_it_has_seen_before(store: Store) -> None:
    claim = started(store)
    iid = claim.instance.id

    def beats() -> int:
        return [e.event_type for e in store.events(iid)].count(Ev.HEARTBEAT)

    assert store.heartbeat(worker="w", lease=300, log_every=0) == 1
    assert beats() == 0  # first sighting of this claim: marked, not logged
    assert store.heartbeat(worker="w", lease=300, log_every=0) == 1
    assert beats() == 1
    assert store.heartbeat(worker="w", lease=300, log_every=3600) == 1
    assert beats() == 1  # logged less than log_every ago
    [beat] = [e for e in store.events(iid) if e.event_type == Ev.HEARTBEAT]
    assert (beat.node, beat.attempt, beat.worker) == ("first", 1, "w")


def test_a_released_task_is_due_at_once_and_claimed_in_doubt(store: Store) -> None:
    claim = started(store)
    iid = claim.instance.id
    store.release(worker="w", instance_ids=[iid], token="not-this-claim")
    assert store.claim(worker="x", types=[TYPE], lease=300) == []  # the wrong token: kept
    store.release(worker="w", instance_ids=[iid], token=claim.task.lease_token)
    task = store.task(iid)
    assert task is not None
    assert (task.lease_owner, task.leased, task.in_flight) == (None, False, True)
    again = claim_one(store, worker="x")
    assert again.instance.id == iid
    assert not again.started
    assert again.task.lease_owner == "x"


def test_a_claim_handed_back_unrun_is_not_in_doubt(store: Store) -> None:
    """``unrun``: the claim started its step and no worker ran it. Its attempt gets a
    STEP_RELEASED and loses its in-flight mark, so the next claim starts the next attempt
    itself; fenced by the token like any release, and a plain release still keeps the mark."""
    claim = started(store)
    iid = claim.instance.id
    assert claim.started
    store.release(worker="w", instance_ids=[iid], token="not-this-claim", unrun=True)
    store.release(worker="x", instance_ids=[iid], token=claim.task.lease_token, unrun=True)
    assert store.claim(worker="x", types=[TYPE], lease=300) == []  # not its claim: kept
    assert Ev.STEP_RELEASED not in [e.event_type for e in store.events(iid)]
    store.release(worker="w", instance_ids=[iid], token=claim.task.lease_token, unrun=True)
    task = store.task(iid)
    assert task is not None
    assert (task.lease_owner, task.leased, task.in_flight) == (None, False, False)
    [released] = [e for e in store.events(iid) if e.event_type == Ev.STEP_RELEASED]
    assert (released.node, released.attempt, released.worker) == ("first", 1, "w")
    again = claim_one(store, worker="x")
    assert (again.instance.id, again.started, again.task.attempt) == (iid, True, 2)
    assert again.instance.projection(in_flight=again.task.in_flight).in_flight
    assert fold(store.events(iid)).attempts == {"first": 2}
    store.release(worker="x", instance_ids=[iid], token=again.task.lease_token)
    task = store.task(iid)
    assert task is not None
    assert task.in_flight  # a plain hand-back: attempt 2 may have run, so in doubt


def test_claim_instance_does_not_hurry_a_task_that_waits(store: Store) -> None:
    later = new(store, delay=3600)  # pending, not in flight, not due
    assert store.claim_instance(later, worker="w", lease=300) is None
    store.wake_instances([later])  # a wake-up makes an unleased task due now
    claim = store.claim_instance(later, worker="w", lease=300)
    assert claim is not None
    assert not claim.started  # claim_instance never starts anything
    assert claim.instance.status == Status.PENDING
    held = started(store, worker="w1")
    store.wake_instances([held.instance.id])  # a leased task is left alone
    assert store.claim(worker="w2", types=[TYPE], lease=300) == []


def test_active_is_the_running_and_stalled_instances(store: Store) -> None:
    pending = new(store, type_="c.idle.v1")  # nobody claims it
    running = started(store).instance.id
    stalled = started(store, type_="c.other.v1").instance.id
    store.quarantine(stalled, reason="test", worker="w")
    finished = new(store)
    cancelled(store, finished)
    assert {r.id for r in store.active()} == {running, stalled}
    assert [r.id for r in store.active(types=["c.other.v1"])] == [stalled]
    assert store.active(types=["c.idle.v1"]) == []
    rec = store.get(pending)
    assert rec is not None
    assert rec.status == Status.PENDING


@pytest.mark.parametrize("how", ["wake", "nudge"])
def test_wake_and_nudge_return_a_waiting_worker(store: Store, how: str) -> None:
    result: list[bool] = []

    def wait() -> None:
        assert store.wait_for_work(120)  # a thread's first wait returns at once (below)
        result.append(store.wait_for_work(120))

    waiter = threading.Thread(target=wait)
    began = time.monotonic()
    waiter.start()
    while waiter.is_alive() and time.monotonic() - began < 60:
        getattr(store, how)()  # a wake-up is not kept for a worker that is not waiting yet
        waiter.join(0.05)
    waiter.join()
    assert result == [True]
    assert time.monotonic() - began < 60


def test_the_first_wait_returns_at_once_for_work_made_due_before_the_watch(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    """A store hears of other connections' commits (LISTEN, data_version) only once its
    watch is up, which the first wait starts: a start committed before that was heard by
    nobody, so a thread's first wait returns at once, woken. Otherwise a runner's idle
    worker slept through it until its safety poll (a CI failure: a timer test's start with
    idle_poll=60). Later waits sleep until woken: test_wake_and_nudge_..., above."""
    url, options = store_url
    producer = open_store(url, **options)
    try:
        iid = new(producer)
    finally:
        producer.close()
    began = time.monotonic()
    assert store.wait_for_work(30) is True
    assert time.monotonic() - began < 15
    assert [c.instance.id for c in store.claim(worker="w", types=[TYPE], lease=300)] == [iid]


def test_the_claimed_task_says_it_is_leased_as_the_stored_row_does(store: Store) -> None:
    first, second = new(store), new(store)
    [claim] = store.claim(worker="w", types=[TYPE], lease=300)
    by_id = store.claim_instance(
        second if claim.instance.id == first else first, worker="w", lease=300
    )
    assert by_id is not None
    for held in (claim, by_id):
        row = store.task(held.instance.id)
        assert row is not None
        assert (held.task.leased, held.task.lease_token) == (row.leased, row.lease_token)
        assert held.task.leased


def test_a_claim_says_whether_another_task_was_due(store: Store) -> None:
    """A claim tells the runner whether to wake one more worker: only when another task
    of its types was due."""
    first, second = new(store), new(store)
    new(store, delay=3600)  # not due: no reason to wake anybody
    [a] = store.claim(worker="w", types=[TYPE], lease=300)
    assert a.more  # the other one is due too
    [b] = store.claim(worker="w", types=[TYPE], lease=300)
    assert {a.instance.id, b.instance.id} == {first, second}
    assert not b.more
    assert store.claim(worker="w", types=[TYPE], lease=300) == []


def test_a_finish_and_the_next_claim_commit_together(store: Store) -> None:
    """``apply_and_claim``: the instance ends and the same worker holds the next due task,
    leased under a fresh token of its incarnation with its step started (SQLite: in one
    commit)."""
    done = started(store)
    after = new(store)
    d = decide.cancel(done.instance.projection(in_flight=True), leased=False)  # a Finish
    version, claims = store.apply_and_claim(
        Commit(done.instance.id, done.instance.version, d, "w"),
        types=[TYPE],
        lease=300,
        incarnation="inc-2",
    )
    assert version > done.instance.version
    ended = store.get(done.instance.id)
    assert ended is not None
    assert ended.status == Status.CANCELLED
    assert store.task(done.instance.id) is None
    [claim] = claims
    assert claim.instance.id == after
    assert claim.started
    token = claim.task.lease_token
    assert token is not None
    assert token.startswith("inc-2/")
    task = store.task(after)
    assert task is not None
    assert (task.lease_owner, task.lease_token, task.leased) == ("w", token, True)
    assert [e.event_type for e in store.events(after)] == [Ev.CREATED, Ev.STEP_STARTED]
    assert store.claim(worker="w2", types=[TYPE], lease=300) == []


def test_a_finish_whose_cas_is_lost_claims_nothing(store: Store) -> None:
    done = started(store)
    after = new(store)
    stale = done.instance.version - 1
    d = decide.cancel(done.instance.projection(in_flight=True), leased=False)
    with pytest.raises(ConcurrencyConflict):
        store.apply_and_claim(Commit(done.instance.id, stale, d, "w"), types=[TYPE], lease=300)
    still = store.get(done.instance.id)
    assert still is not None
    assert still.status == Status.RUNNING  # nothing of the decision was written ...
    task = store.task(after)
    assert task is not None
    assert not task.leased  # ... and nothing was claimed
    assert [c.instance.id for c in store.claim(worker="w2", types=[TYPE], lease=300)] == [after]


def test_a_finish_never_claims_its_own_task_whose_lease_ran_out(store: Store) -> None:
    """The ending instance's task is due again (lease 0) and first in the claim's order;
    the finish deletes it, and the claim after the finish takes the next one. PostgreSQL
    runs both in one statement, whose snapshot still holds that task: it is excluded."""
    mine = new(store)
    [claim] = store.claim(worker="w", types=[TYPE], lease=0)  # run out at once
    assert claim.instance.id == mine
    after = new(store)
    d = decide.cancel(claim.instance.projection(in_flight=True), leased=False)
    version, claims = store.apply_and_claim(
        Commit(mine, claim.instance.version, d, "w"), types=[TYPE], lease=300
    )
    assert [c.instance.id for c in claims] == [after]
    ended = store.get(mine)
    assert ended is not None
    assert (ended.version, ended.status) == (version, Status.CANCELLED)
    assert store.task(mine) is None
    assert Ev.STEP_STARTED not in [e.event_type for e in store.events(mine)][2:]


def test_a_finish_with_nothing_due_claims_nothing(store: Store) -> None:
    done = started(store)
    new(store, delay=3600)  # not due
    d = decide.cancel(done.instance.projection(in_flight=True), leased=False)
    version, claims = store.apply_and_claim(
        Commit(done.instance.id, done.instance.version, d, "w"), types=[TYPE], lease=300
    )
    assert claims == []
    ended = store.get(done.instance.id)
    assert ended is not None
    assert (ended.version, ended.status) == (version, Status.CANCELLED)


def test_the_claim_after_a_finish_sees_the_lock_it_released(store: Store) -> None:
    """The claim runs after the decision in the same transaction: the waiter that the
    finish's lock release made due is the one it takes."""
    holder = started(store, type_="c.holder.v1")
    waiter = new(store, delay=3600)  # parked on the lock: due only when woken
    store.acquire_lock("k", holder.instance.id)
    assert store.acquire_lock("k", waiter) == holder.instance.id
    d = decide.cancel(holder.instance.projection(in_flight=True), leased=False)
    _, claims = store.apply_and_claim(
        Commit(holder.instance.id, holder.instance.version, d, "w"), types=[TYPE], lease=300
    )
    assert [c.instance.id for c in claims] == [waiter]
    assert store.lock_holder("k") is None


def test_a_continue_renews_the_lease_only_once_half_of_it_is_used(store: Store) -> None:
    """A fresh lease is kept as the claim set it (on PostgreSQL the task's row is then
    updated in place, touching no index); one more than half used is renewed in full."""
    spec = ThreeSteps.spec()
    claim = started(store)
    iid = claim.instance.id
    leased = store.task(iid)
    assert leased is not None
    assert 290 < leased.due_at - time.time() <= 300
    # A continue with the same 300 s lease, 0.3 s in: the lease stays as it was.
    time.sleep(0.3)
    d = decide.success(spec, claim.instance.projection(in_flight=True), "first", 1, "second", {})
    assert isinstance(d.task, decide.Continue)
    version = store.apply(Commit(iid, claim.instance.version, d, "w", lease=300))
    task = store.task(iid)
    assert task is not None
    assert (task.node, task.attempt, task.in_flight) == ("second", 1, True)
    assert task.due_at == pytest.approx(leased.due_at, abs=0.002)
    assert (task.lease_owner, task.lease_token) == ("w", leased.lease_token)
    # The next continue's lease is 1,000 s: 300 s left is less than half, so it is renewed.
    d = decide.success(spec, d.state, "second", 1, "third", {})
    store.apply(Commit(iid, version, d, "w", lease=1000))
    task = store.task(iid)
    assert task is not None
    assert task.node == "third"
    assert 990 < task.due_at - time.time() <= 1000
    assert (task.lease_owner, task.lease_token) == ("w", leased.lease_token)
