"""The inbox's contract (``ports.Inbox``), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from statemachine_wf import ConcurrencyConflict, Retry, Status, TypeKindConflict
from statemachine_wf.core import decide
from statemachine_wf.core.store import Commit, Store
from statemachine_wf.definition.events import Ev
from tests.unit.core.workflows import ThreeSteps

from .helpers import started

SPEC = ThreeSteps.spec()


def letter(store: Store, n: int, instance_id: str | None = None) -> int:
    store.dead_letter(instance_id=instance_id, envelope={"n": n}, reason=f"r{n}", worker="w")
    return int(store.dead_letters(limit=1)[0]["id"])


def test_dead_letters_are_listed_newest_first(store: Store) -> None:
    ids = [letter(store, n) for n in range(3)]
    listed = store.dead_letters()
    assert [d["id"] for d in listed] == ids[::-1]
    assert [d["envelope"] for d in listed] == [{"n": 2}, {"n": 1}, {"n": 0}]
    assert [d["reason"] for d in store.dead_letters(limit=2)] == ["r2", "r1"]
    got = store.dead_letter_get(ids[0])
    assert got is not None
    assert (got["envelope"], got["reason"], got["worker"]) == ({"n": 0}, "r0", "w")
    assert got["instance_id"] is None
    assert store.dead_letter_get(max(ids) + 1000) is None


def test_mark_redriven_succeeds_once(store: Store) -> None:
    first, second = letter(store, 1), letter(store, 2)
    claim = started(store)
    assert store.mark_redriven(first, instance_id=claim.instance.id, by="ops")
    assert not store.mark_redriven(first, instance_id=None, by="someone else")
    got = store.dead_letter_get(first)
    assert got is not None
    assert (got["redriven_by"], got["redrive_instance_id"]) == ("ops", claim.instance.id)
    assert got["redriven_at"] is not None
    untouched = store.dead_letter_get(second)
    assert untouched is not None
    assert untouched["redriven_at"] is None
    assert not store.mark_redriven(second + 1000, instance_id=None, by="ops")


def test_purge_of_dead_letters_goes_by_age_redriven_or_not(store: Store) -> None:
    ids = [letter(store, n) for n in range(3)]
    store.mark_redriven(ids[0], instance_id=None, by="ops")
    assert store.purge_dead_letters_batch(older_than=3600.0, batch_size=10) == 0
    assert store.purge_dead_letters_batch(older_than=-3600.0, batch_size=2) == 2
    assert store.purge_dead_letters_batch(older_than=-3600.0, batch_size=2) == 1
    assert store.dead_letters() == []


def test_a_decision_dead_letters_in_its_own_commit_or_not_at_all(store: Store) -> None:
    claim = started(store)
    iid = claim.instance.id
    state = claim.instance.projection(in_flight=True)
    d = decide.failure(SPEC, state, "first", 5, Retry, TimeoutError("slow"), failures=4)
    assert d.dead_letter is not None  # retries exhausted: STALLED and dead-lettered
    stale = Commit(iid, claim.instance.version - 1, d, "w")
    with pytest.raises(ConcurrencyConflict):
        store.apply(stale)
    assert store.dead_letters() == []  # the lost CAS wrote no letter
    store.apply(Commit(iid, claim.instance.version, d, "w"))
    [dead] = store.dead_letters()
    assert (dead["instance_id"], dead["reason"]) == (iid, d.dead_letter)
    assert dead["envelope"]["type"] == claim.instance.type
    assert dead["envelope"]["status"] == Status.STALLED
    assert Ev.DEAD_LETTERED in [e.event_type for e in store.events(iid)]


def test_types_are_registered_once_per_name_and_one_kind_only(store: Store) -> None:
    store.register_types(["b.type.v1", "a.type.v1"], by="runner-1")
    store.register_types(["a.type.v1"], by="runner-2")  # again: still one row
    store.register_types(["swf.dag"], by="runner-1", kind="dag")
    assert store.registered_types() == ["a.type.v1", "b.type.v1"]
    assert store.registered_types("dag") == ["swf.dag"]
    with pytest.raises(TypeKindConflict):
        store.register_types(["a.new.v1", "swf.dag"], by="runner-3")
    with pytest.raises(TypeKindConflict):
        store.register_types(["b.type.v1"], by="runner-3", kind="dag")
    assert store.registered_types() == ["a.type.v1", "b.type.v1"]  # nothing written
    assert store.registered_types("dag") == ["swf.dag"]
