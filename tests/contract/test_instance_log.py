"""The instance log's contract (``ports.InstanceLog``), on SQLite and PostgreSQL."""

from __future__ import annotations

import time
import uuid

import pytest

from statemachine_wf import ConcurrencyConflict, InputError, Retry, Status
from statemachine_wf.core import decide
from statemachine_wf.core.fold import fold
from statemachine_wf.core.store import Commit, NewInstance, Store
from statemachine_wf.definition.events import Ev
from tests.integration.core.test_store_contract import new
from tests.unit.core.workflows import ThreeSteps

from .helpers import TYPE, cancelled, claim_one, started

SPEC = ThreeSteps.spec()


def assert_row_is_the_fold(store: Store, instance_id: str) -> None:
    rec = store.get(instance_id)
    assert rec is not None
    assert rec.projection().comparable() == fold(store.events(instance_id)).comparable()


def test_create_is_idempotent_on_the_key_and_refuses_a_known_id(store: Store) -> None:
    first = new(store, key="k-1")
    again = store.create(NewInstance(str(uuid.uuid4()), TYPE, {"n": 2}, "first", "machine", "k-1"))
    assert again == (first, False)
    with pytest.raises(ConcurrencyConflict):  # the same id without a key: not a second row
        store.create(NewInstance(first, TYPE, {"n": 3}, "first"))
    rec = store.get(first)
    assert rec is not None
    assert rec.input == {"n": 1}
    assert [e.event_type for e in store.events(first)] == [Ev.CREATED]
    assert store.count_instances() == 1


def test_create_many_matches_keys_and_a_type_clash_writes_nothing(store: Store) -> None:
    known = new(store, key="known")

    def item(key: str | None, type_: str = TYPE) -> NewInstance:
        return NewInstance(str(uuid.uuid4()), type_, {"n": 1}, "first", idempotency_key=key)

    batch = [item("known"), item("fresh"), item("fresh"), item(None)]
    out = store.create_many(batch)
    assert out[0] == (known, False)
    assert out[1] == (batch[1].id, True)
    assert out[2] == (batch[1].id, False)  # repeated in the batch: its first occurrence
    assert out[3] == (batch[3].id, True)
    assert store.count_instances() == 3
    with pytest.raises(InputError):
        store.create_many([item("new-key"), item("known", type_="c.other.v1")])
    assert store.count_instances() == 3


def test_create_many_refuses_a_key_repeated_under_another_type(store: Store) -> None:
    def item(key: str, type_: str) -> NewInstance:
        return NewInstance(str(uuid.uuid4()), type_, {"n": 1}, "first", idempotency_key=key)

    with pytest.raises(InputError, match="'twice'"):
        store.create_many([item("once", TYPE), item("twice", TYPE), item("twice", "c.other.v1")])
    assert store.count_instances() == 0  # all or nothing


def test_apply_with_a_stale_version_raises_and_writes_nothing(store: Store) -> None:
    claim = started(store)
    iid = claim.instance.id
    state = claim.instance.projection(in_flight=True)
    saved = decide.saved(state, "first", 1, {"a": 1})
    v = store.apply(Commit(iid, claim.instance.version, saved, "w"))
    assert v == claim.instance.version + 1
    before = (store.get(iid), store.events(iid), store.task(iid))
    stale = decide.success(SPEC, state, "first", 1, "second", {"a": 2})
    with pytest.raises(ConcurrencyConflict):
        store.apply(Commit(iid, claim.instance.version, stale, "w"))
    assert (store.get(iid), store.events(iid), store.task(iid)) == before


def test_events_come_back_in_seq_order_and_after_seq_filters(store: Store) -> None:
    claim = started(store)
    iid = claim.instance.id
    state = claim.instance.projection(in_flight=True)
    for i in range(3):
        d = decide.saved(state, "first", 1, {f"k{i}": i})
        store.apply(Commit(iid, claim.instance.version + i, d, "w"))
        state = d.state
    new(store)  # another instance's events interleave in the sequence, not in this log
    events = store.events(iid)
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs) == 5
    assert {e.instance_id for e in events} == {iid}
    assert [e.event_type for e in events] == [Ev.CREATED, Ev.STEP_STARTED] + [Ev.PROGRESS_SET] * 3
    assert store.events(iid, after_seq=seqs[1]) == events[2:]
    assert store.events(iid, after_seq=seqs[-1]) == []
    assert store.events(str(uuid.uuid4())) == []


def test_the_row_equals_the_fold_of_the_log_after_every_decision(store: Store) -> None:
    """Pins the claim's own projection writes (SQL on PostgreSQL) to ``fold.fold``."""
    iid = new(store)
    assert_row_is_the_fold(store, iid)
    claim = claim_one(store)  # the claim starts attempt 1 itself
    assert claim.started
    assert_row_is_the_fold(store, iid)
    state = claim.instance.projection(in_flight=True)
    d = decide.saved(state, "first", 1, {"a": 1})
    version = store.apply(Commit(iid, claim.instance.version, d, "w"))
    assert_row_is_the_fold(store, iid)
    d = decide.success(SPEC, d.state, "first", 1, "second", {})  # and starts "second"
    version = store.apply(Commit(iid, version, d, "w"))
    assert_row_is_the_fold(store, iid)
    d = decide.failure(SPEC, d.state, "second", 1, Retry, TimeoutError("slow"), 0)
    assert isinstance(d.task, decide.Reschedule)
    store.apply(Commit(iid, version, d, "w"))
    assert_row_is_the_fold(store, iid)
    store.wake_instances([iid])  # the back-off is over
    again = claim_one(store, worker="w2")  # the claim starts attempt 2 in its own commit
    assert again.started
    assert again.instance.attempts == {"first": 1, "second": 2}
    assert_row_is_the_fold(store, iid)
    state = again.instance.projection(in_flight=True)
    d = decide.success(SPEC, state, "second", 2, None, {"b": "x"})
    version = store.apply(Commit(iid, again.instance.version, d, "w2"))
    d = decide.success(SPEC, d.state, "third", 1, "COMPLETED", {"c": True})
    store.apply(Commit(iid, version, d, "w2"))
    rec = store.get(iid)
    assert rec is not None
    assert rec.status == Status.COMPLETED
    assert rec.progress == {"a": 1, "b": "x", "c": True}
    assert store.task(iid) is None
    assert_row_is_the_fold(store, iid)


def test_list_and_count_page_through_the_same_filtered_set(store: Store) -> None:
    ids = [new(store, type_="c.a_b.v1") for _ in range(3)] + [new(store, type_="c.axb.v1")]
    listed = store.list_instances()
    assert sorted(r.id for r in listed) == sorted(ids)
    keys = [(r.created_at, r.id) for r in listed]
    assert keys == sorted(keys, reverse=True)  # newest first, ties by id
    assert store.count_instances() == 4
    pages = [store.list_instances(limit=2, offset=o) for o in (0, 2, 4)]
    order = [r.id for r in listed]
    assert [[r.id for r in p] for p in pages] == [order[:2], order[2:], []]
    # A prefix is literal: "_" is not a wildcard.
    assert {r.id for r in store.list_instances(type_prefix="c.a_")} == set(ids[:3])
    assert store.count_instances(type_prefix="c.a_") == 3
    claim_one(store, type_="c.axb.v1")
    assert [r.id for r in store.list_instances(status=[Status.RUNNING])] == [ids[3]]
    assert store.count_instances(status=[Status.PENDING, Status.RUNNING]) == 4


def test_soft_delete_takes_only_a_finished_instance_and_hides_it(store: Store) -> None:
    iid = new(store)
    assert not store.soft_delete(iid)  # still active
    assert not store.soft_delete(str(uuid.uuid4()))
    cancelled(store, iid)
    assert store.soft_delete(iid)
    assert not store.soft_delete(iid)  # once
    assert store.list_instances() == []
    assert store.count_instances() == 0
    assert [r.id for r in store.list_instances(include_deleted=True)] == [iid]
    assert store.count_instances(include_deleted=True) == 1
    rec = store.get(iid)
    assert rec is not None
    assert rec.deleted_at is not None
    assert store.events(iid)[-1].event_type == Ev.DELETED


def test_purge_deletes_finished_instances_with_their_log_never_active_ones(store: Store) -> None:
    active = new(store)
    done = [new(store), new(store)]
    for iid in done:
        cancelled(store, iid)
    future = -3600.0  # "finished more than -1 h ago": everything finished so far
    assert store.purge_batch(older_than=3600.0, batch_size=10) == 0
    assert store.purge_batch(older_than=future, batch_size=1) == 1
    assert store.purge_batch(older_than=future, batch_size=10) == 1
    assert store.purge_batch(older_than=future, batch_size=10) == 0
    for iid in done:
        assert store.get(iid) is None
        assert store.events(iid) == []
    assert store.get(active) is not None
    assert store.task(active) is not None


def test_quarantine_and_rebuild_move_the_version_on(store: Store) -> None:
    claim = started(store)
    iid = claim.instance.id
    state = claim.instance.projection(in_flight=True)
    store.quarantine(iid, reason="corrupt row: test", worker="w")
    rec = store.get(iid)
    assert rec is not None
    assert rec.status == Status.STALLED
    assert rec.version > claim.instance.version
    with pytest.raises(ConcurrencyConflict):  # decided before the quarantine: refused
        store.apply(Commit(iid, claim.instance.version, decide.saved(state, "first", 1, {}), "w"))
    assert store.events(iid)[-1].event_type == Ev.QUARANTINED
    rebuilt = fold(store.events(iid))
    store.rebuild(iid, rebuilt)
    after = store.get(iid)
    assert after is not None
    assert after.version > rec.version
    assert after.projection().comparable() == rebuilt.comparable()


def test_quarantine_writes_its_dead_letter_and_holds_the_task_back(store: Store) -> None:
    claim = started(store)
    iid = claim.instance.id
    before = len(store.dead_letters())
    store.quarantine(iid, reason="corrupt row: test", worker="w")
    letters = store.dead_letters()
    assert len(letters) == before + 1
    letter = letters[0]
    assert letter["instance_id"] == iid
    assert letter["reason"] == "corrupt row: test"
    envelope = letter["envelope"]
    assert envelope["id"] == iid
    assert envelope["type"] == TYPE
    assert envelope["status"] == str(Status.STALLED)
    rec = store.get(iid)
    assert rec is not None
    assert rec.error is not None
    assert rec.error["code"] == "quarantined"
    task = store.task(iid)
    assert task is not None
    assert task.lease_owner is None  # handed back, due in a day
    assert task.due_at > time.time() + 3600
    quarantined = [e for e in store.events(iid) if e.event_type == Ev.QUARANTINED]
    assert len(quarantined) == 1
    assert quarantined[0].worker == "w"


def test_quarantine_of_an_unknown_instance_writes_nothing(store: Store) -> None:
    missing = str(uuid.uuid4())
    store.quarantine(missing, reason="gone", worker="w")
    assert store.get(missing) is None
    assert store.events(missing) == []
    assert all(letter["instance_id"] != missing for letter in store.dead_letters())


def test_apply_keeps_event_payloads_and_the_projection_exactly(store: Store) -> None:
    claim = started(store)
    iid = claim.instance.id
    state = claim.instance.projection(in_flight=True)
    delta = {"f": 0.1, "big": 2**53 + 1, "s": 'é \u2603 "q"', "nested": {"z": [1, None, True]}}
    version = store.apply(
        Commit(iid, claim.instance.version, decide.saved(state, "first", 1, delta), "w")
    )
    assert version == claim.instance.version + 1
    last = store.events(iid)[-1]
    assert last.event_type == Ev.PROGRESS_SET
    assert last.payload == {"progress": delta}
    assert last.error is None
    assert last.worker == "w"
    rec = store.get(iid)
    assert rec is not None
    assert rec.version == version
    assert rec.progress == delta
    assert_row_is_the_fold(store, iid)
