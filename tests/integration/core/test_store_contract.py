"""The store contract: both stores behave the same (run on SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid

import pytest

from statemachine_wf import ConcurrencyConflict, Status
from statemachine_wf.core import decide
from statemachine_wf.core.fold import fold
from statemachine_wf.core.store import Commit, NewInstance, Store
from statemachine_wf.definition.events import Ev, NewEvent


def new(
    store: Store,
    *,
    key: str | None = None,
    type_: str = "c.thing.v1",
    delay: float = 0.0,
    priority: int = 100,
) -> str:
    instance_id, _created = store.create(
        NewInstance(
            id=str(uuid.uuid4()),
            type=type_,
            input={"n": 1},
            initial="first",
            idempotency_key=key,
            delay=delay,
            priority=priority,
        )
    )
    return instance_id


def test_create_is_idempotent_on_key(store: Store) -> None:
    a = new(store, key="k-1")
    b, created = store.create(
        NewInstance(
            id=str(uuid.uuid4()),
            type="c.thing.v1",
            input={},
            initial="first",
            idempotency_key="k-1",
        )
    )
    assert (b, created) == (a, False)
    assert len(store.events(a)) == 1
    rec = store.get(a)
    assert rec is not None
    assert rec.status == Status.PENDING
    assert rec.step == "first"


def test_claim_writes_the_intent_in_the_same_commit(store: Store) -> None:
    a = new(store)
    [claim] = store.claim(worker="w1", types=["c.thing.v1"], lease=30)
    assert claim.started
    assert claim.task.attempt == 1
    assert claim.task.in_flight
    assert claim.instance.status == Status.RUNNING
    assert claim.instance.version == 1
    assert [e.event_type for e in store.events(a)] == ["WORKFLOW_CREATED", "STEP_STARTED"]
    assert store.claim(worker="w2", types=["c.thing.v1"], lease=30) == []  # leased


def test_claim_filters_types_priority_and_due_time(store: Store) -> None:
    later = new(store, delay=60)
    low = new(store, priority=200)
    high = new(store, priority=1)
    other = new(store, type_="c.other.v1")
    [c1] = store.claim(worker="w", types=["c.thing.v1"], lease=30)
    [c2] = store.claim(worker="w", types=["c.thing.v1"], lease=30)
    assert (c1.instance.id, c2.instance.id) == (high, low)
    assert store.claim(worker="w", types=["c.thing.v1"], lease=30) == []
    assert later not in (c1.instance.id, c2.instance.id)
    [c3] = store.claim(worker="w", types=["c.other.v1"], lease=30)
    assert c3.instance.id == other
    wait = store.next_due(types=["c.thing.v1"])
    assert wait is not None
    assert 0 < wait <= 60


def test_apply_is_version_checked(store: Store) -> None:
    a = new(store)
    [claim] = store.claim(worker="w", types=["c.thing.v1"], lease=30)
    state = claim.instance.projection(in_flight=True)
    d = decide.saved(state, "first", 1, {"x": 1})
    v = store.apply(Commit(a, claim.instance.version, d, "w"))
    assert v == claim.instance.version + 1
    with pytest.raises(ConcurrencyConflict):
        store.apply(Commit(a, claim.instance.version, d, "w"))  # stale version: refused
    assert [e.event_type for e in store.events(a)].count("PROGRESS_SET") == 1


def test_a_commit_that_names_its_status_writes_the_same_row(store: Store) -> None:
    # Commit.status (the status the decision was made on) lets a store leave the status
    # column alone when the decision keeps it; the row must be the one written without it.
    rows = []
    for named in (False, True):
        a = new(store)
        [claim] = store.claim(worker="w", types=["c.thing.v1"], lease=30)
        state = claim.instance.projection(in_flight=True)
        kept = decide.saved(state, "first", 1, {"x": 1})  # RUNNING stays RUNNING
        status = state.status if named else None
        v = store.apply(Commit(a, claim.instance.version, kept, "w", status=status))
        mid = store.get(a)
        assert mid is not None
        assert (mid.status, mid.version) == (Status.RUNNING, v)
        done = decide.cancel(kept.state, leased=False)  # RUNNING -> CANCELLED
        status = kept.state.status if named else None
        store.apply(Commit(a, v, done, "w", status=status))
        rec = store.get(a)
        assert rec is not None
        assert rec.status == Status.CANCELLED
        assert fold(store.events(a)).comparable() == rec.projection().comparable()
        rows.append((mid.projection().comparable(), rec.projection().comparable()))
    assert rows[0] == rows[1]


def test_duplicate_once_per_attempt_event_is_refused(store: Store) -> None:
    a = new(store)
    [_claim] = store.claim(worker="w", types=["c.thing.v1"], lease=30)
    rec = store.get(a)
    assert rec is not None
    # A second STEP_STARTED for attempt 1 (a duplicate delivery) under a current version.
    dup = decide.Decision(
        (NewEvent(Ev.STEP_STARTED, "first", 1),),
        rec.projection(in_flight=True),
        decide.KeepTask(),
    )
    with pytest.raises(ConcurrencyConflict):
        store.apply(Commit(a, rec.version, dup, "w"))
    after = store.get(a)
    assert after is not None
    assert after.version == rec.version
    assert [e.event_type for e in store.events(a)].count("STEP_STARTED") == 1


def test_expired_lease_is_due_again_without_a_sweeper(store: Store) -> None:
    a = new(store)
    [first] = store.claim(worker="dead", types=["c.thing.v1"], lease=0.05)
    import time

    time.sleep(0.1)
    [again] = store.claim(worker="alive", types=["c.thing.v1"], lease=30)
    assert again.instance.id == a
    assert not again.started  # the step was in flight: in doubt, the runner decides
    assert again.task.in_flight
    assert again.task.lease_owner == "alive"
    assert again.instance.version == first.instance.version + 1  # the dead one is fenced


def test_heartbeat_extends_and_release_hands_back(store: Store) -> None:
    a = new(store)
    store.claim(worker="w", types=["c.thing.v1"], lease=0.2)
    assert store.heartbeat(worker="w", lease=30) == 1
    import time

    time.sleep(0.3)
    assert store.claim(worker="x", types=["c.thing.v1"], lease=30) == []  # still held
    store.release(worker="w", instance_ids=[a])
    [c] = store.claim(worker="x", types=["c.thing.v1"], lease=30)
    assert c.instance.id == a
    assert not c.started


def test_release_all_hands_back_a_previous_lifes_leases(store: Store) -> None:
    a = new(store)
    store.claim(worker="node-1", types=["c.thing.v1"], lease=300)
    assert store.claim_instance(a, worker="node-1", lease=30) is None  # held, even by "us"
    store.release(worker="node-1")  # node-1 restarted with its stable id
    c = store.claim_instance(a, worker="node-1", lease=30)
    assert c is not None
    assert c.task.in_flight
    assert not c.started


def test_finish_removes_the_task_and_fold_matches(store: Store) -> None:
    a = new(store)
    [claim] = store.claim(worker="w", types=["c.thing.v1"], lease=30)
    d = decide.cancel(claim.instance.projection(in_flight=True), leased=False)
    store.apply(Commit(a, claim.instance.version, d, "w"))
    assert store.task(a) is None
    rec = store.get(a)
    assert rec is not None
    assert rec.status == Status.CANCELLED
    assert fold(store.events(a)).comparable() == rec.projection().comparable()


def test_dead_letters_and_quarantine(store: Store) -> None:
    a = new(store)
    store.quarantine(a, reason="corrupt row: test", worker="w")
    rec = store.get(a)
    assert rec is not None
    assert rec.status == Status.STALLED
    assert rec.error is not None
    assert rec.error["code"] == "quarantined"
    letters = store.dead_letters()
    assert letters[0]["reason"] == "corrupt row: test"
    assert letters[0]["instance_id"] == a
    assert store.claim(worker="w", types=["c.thing.v1"], lease=30) == []  # parked


def test_list_and_active(store: Store) -> None:
    a = new(store)
    b = new(store, type_="c.other.v1")
    store.claim(worker="w", types=["c.thing.v1"], lease=30)
    assert {r.id for r in store.list_instances(type_prefix="c.other.")} == {b}
    assert {r.id for r in store.list_instances(status=[Status.RUNNING])} == {a}
    assert [r.id for r in store.active()] == [a]
