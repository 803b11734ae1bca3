"""Writes that touch a set of rows in one statement (PostgreSQL) or one short script of
set-based statements (SQLite): each row of the set, and only those, on both stores."""

from __future__ import annotations

import time
import uuid

from statemachine_wf.core.store import RESOLVE_ON_CLAIM, NewInstance, Store
from statemachine_wf.definition.events import Ev, Status
from tests.integration.core.test_store_contract import new

from .helpers import TYPE, cancelled, claim_one


def test_releasing_one_key_wakes_only_that_keys_waiters(store: Store) -> None:
    holder = new(store, type_="c.holder.v1")
    w1, w2 = new(store, delay=3600), new(store, delay=3600)  # parked: due only when woken
    store.acquire_lock("k1", holder)
    store.acquire_lock("k2", holder)
    assert store.acquire_lock("k1", w1) == holder
    assert store.acquire_lock("k2", w2) == holder
    assert store.release_locks(holder, key="k1") == 1
    [claim] = store.claim(worker="w", types=[TYPE], lease=300, limit=5)
    assert claim.instance.id == w1  # w2 still waits on k2
    assert store.lock_holder("k2") == holder
    assert store.release_locks(holder) == 1
    [claim] = store.claim(worker="w", types=[TYPE], lease=300, limit=5)
    assert claim.instance.id == w2


def test_a_holder_is_not_its_own_locks_waiter(store: Store) -> None:
    a, b = new(store, type_="c.a.v1"), new(store, delay=3600)
    assert store.acquire_lock("k", b) == b  # b holds k: not queued behind itself
    assert store.acquire_lock("k", a) == b
    assert store.release_locks(b) == 1
    assert [c.instance.id for c in store.claim(worker="w", types=[TYPE], lease=300)] == []


def test_wake_instances_makes_each_named_unleased_task_due(store: Store) -> None:
    a, b, c = (new(store, delay=3600) for _ in range(3))
    assert store.claim(worker="w", types=[TYPE], lease=300) == []
    store.wake_instances([a, c])
    claimed = {x.instance.id for x in store.claim(worker="w", types=[TYPE], lease=300, limit=5)}
    assert claimed == {a, c}
    store.wake_instances([])  # nothing to wake
    task = store.task(b)
    assert task is not None
    assert not task.leased


def test_a_second_soft_delete_writes_no_second_event(store: Store) -> None:
    iid = new(store)
    cancelled(store, iid)
    assert store.soft_delete(iid)
    assert not store.soft_delete(iid)
    deleted = [e for e in store.events(iid) if e.event_type == Ev.DELETED]
    [event] = deleted
    assert event.payload == {}
    assert event.worker is None


def test_list_filters_combine(store: Store) -> None:
    a = new(store, type_="c.x.v1")
    b = new(store, type_="c.x.v1")
    new(store, type_="c.y.v1")
    cancelled(store, b)
    assert {r.id for r in store.list_instances(status=[Status.CANCELLED])} == {b}
    assert {r.id for r in store.list_instances(status=[Status.PENDING], type_prefix="c.x.")} == {a}
    assert store.count_instances(status=[Status.PENDING, Status.CANCELLED], type_prefix="c.x%") == 2
    store.soft_delete(b)
    assert store.count_instances(type_prefix="c.x.") == 1
    assert store.count_instances(type_prefix="c.x.", include_deleted=True) == 2


def test_purges_count_what_they_removed(store: Store) -> None:
    ids = [new(store) for _ in range(3)]
    for iid in ids:
        cancelled(store, iid)
    future = -3600.0  # "older than an hour from now": everything
    assert store.purge_batch(older_than=future, batch_size=2, soft=True) == 2
    assert store.purge_batch(older_than=future, batch_size=5, soft=True) == 1
    assert store.purge_batch(older_than=future, batch_size=2) == 2
    assert store.purge_batch(older_than=future, batch_size=2) == 1
    assert store.count_instances(include_deleted=True) == 0
    for n in range(3):
        store.dead_letter(instance_id=None, envelope={"n": n}, reason="r", worker="w")
    assert store.purge_dead_letters_batch(older_than=future, batch_size=2) == 2
    assert store.purge_dead_letters_batch(older_than=future, batch_size=2) == 1
    assert store.dead_letters() == []


def test_a_heartbeat_logs_each_seen_claim_and_marks_each_new_one(store: Store) -> None:
    a = new(store)
    assert claim_one(store).instance.id == a
    assert store.heartbeat(worker="w", lease=300, log_every=0) == 1  # a: seen
    b = new(store)
    assert claim_one(store).instance.id == b
    assert store.heartbeat(worker="w", lease=300, log_every=0) == 2  # a: logged; b: seen

    def beats(iid: str) -> list[float]:
        return [
            e.payload["lease_seconds"] for e in store.events(iid) if e.event_type == Ev.HEARTBEAT
        ]

    assert (beats(a), beats(b)) == ([300], [])
    assert store.heartbeat(worker="w", lease=30.5, log_every=0) == 2
    assert (beats(a), beats(b)) == ([300, 30.5], [30.5])
    # A hand-back and a new claim: another lease token, so a first sighting again.
    store.release(worker="w", instance_ids=[a, b])
    assert {c.instance.id for c in store.claim(worker="w", types=[TYPE], lease=300, limit=5)} == {
        a,
        b,
    }
    assert store.heartbeat(worker="w", lease=300, log_every=0) == 2
    assert (beats(a), beats(b)) == ([300, 30.5], [30.5])
    assert store.heartbeat(worker="w", lease=300, log_every=0) == 2
    assert (len(beats(a)), len(beats(b))) == (3, 2)


def test_create_writes_the_row_its_event_and_its_task_once(store: Store) -> None:
    iid = str(uuid.uuid4())
    at = time.time() + 7200
    new_one = NewInstance(iid, TYPE, {"n": 1}, "first", idempotency_key="k", run_at=at)
    assert store.create(new_one) == (iid, True)
    assert store.create(new_one) == (iid, False)  # a producer's retry: same id, same key
    [event] = store.events(iid)
    assert event.event_type == Ev.CREATED
    assert event.payload == {"input": {"n": 1}, "initial": "first"}
    task = store.task(iid)
    assert task is not None
    assert (task.node, task.slot, task.kind, task.type) == ("first", "", "machine", TYPE)
    assert abs(task.due_at - at) < 0.01
    bare = str(uuid.uuid4())  # started from SQL-like: the claim resolves the first step
    assert store.create(NewInstance(bare, TYPE, {}, RESOLVE_ON_CLAIM, delay=60)) == (bare, True)
    rec = store.get(bare)
    assert rec is not None
    assert rec.step is None
    assert [e.payload for e in store.events(bare)] == [{"input": {}, "initial": None}]
    task = store.task(bare)
    assert task is not None
    assert task.node == ""
    assert 50 < task.due_at - time.time() <= 60
