"""The signals' contract (``ports.Signals``), on SQLite and PostgreSQL.

An instance of ``Approval`` (``tests/integration/signals/workflows.py``) is parked with
``waits.park`` as a runner would park it, and resumed with ``waits.deliver``.
"""

from __future__ import annotations

import uuid

import pytest

from statemachine_wf import ConcurrencyConflict, InvalidState, NotFound, Status
from statemachine_wf.core import decide
from statemachine_wf.core.decide import Finish
from statemachine_wf.core.fold import fold
from statemachine_wf.core.store import Claim, Commit, Store
from statemachine_wf.core.waits import NewSignal, SignalRecord, deliver, park
from statemachine_wf.definition.events import Ev
from statemachine_wf.errors import Parked
from tests.integration.core.test_store_contract import new
from tests.integration.signals.workflows import Approval

from .helpers import cancelled, claim_one, started

SPEC = Approval.spec()
TYPE = Approval.workflow_type
LIMIT = 262144


def waiting(store: Store, *, token: str = "T1", until: float | None = None) -> str:
    """An Approval instance parked on its wait for ``approved`` (key "0", ``token``)."""
    claim = started(store, type_=TYPE)
    exc = Parked(key="0", kind="signal", name="approved", token=token, until=until)
    d = park(claim.instance.projection(in_flight=True), "ask", 1, exc, 0)
    store.apply(Commit(claim.instance.id, claim.instance.version, d, "w"))
    rec = store.get(claim.instance.id)
    assert rec is not None
    assert rec.waiting == "0"
    return claim.instance.id


def rows(store: Store, claim: Claim) -> list[SignalRecord]:
    """The due pending rows the claim read, or (when it did not) the store's."""
    if claim.signals is not None:
        return list(claim.signals)
    return store.pending_signals(claim.instance.id)


def resume(store: Store, claim: Claim) -> Commit:
    """The commit a runner makes for a claimed waiting instance (deliver its rows)."""
    state = claim.instance.projection(in_flight=claim.task.in_flight)
    d = deliver(SPEC, state, rows(store, claim), max_payload=LIMIT)
    return Commit(claim.instance.id, claim.instance.version, d, claim.task.lease_owner)


def test_a_signal_needs_an_instance_that_has_not_ended(store: Store) -> None:
    with pytest.raises(NotFound):
        store.signal(NewSignal(str(uuid.uuid4()), "approved"))
    ended = new(store, type_=TYPE)
    cancelled(store, ended)
    with pytest.raises(InvalidState):
        store.signal(NewSignal(ended, "approved"))
    assert store.signals() == []
    assert sum(store.signal_counts().values()) == 0


def test_a_signal_is_delivered_once(store: Store) -> None:
    iid = waiting(store)
    sid = store.signal(NewSignal(iid, "approved", {"ok": 1}, token="T1"))
    claim = claim_one(store, type_=TYPE)  # the insert made the parked task due
    assert not claim.started
    assert [(s.id, s.payload, s.state) for s in rows(store, claim)] == [(sid, {"ok": 1}, "pending")]
    commit = resume(store, claim)
    store.apply(commit)
    assert store.signal_counts(instance_id=iid)["applied"] == 1
    assert store.signal_counts(instance_id=iid)["pending"] == 0
    assert store.pending_signals(iid) == []
    with pytest.raises(ConcurrencyConflict):  # a duplicate resume changes nothing
        store.apply(commit)
    received = [e for e in store.events(iid) if e.event_type == Ev.SIGNAL_RECEIVED]
    assert [e.payload["payload"] for e in received] == [{"ok": 1}]
    assert store.signal_counts(instance_id=iid)["applied"] == 1
    rec = store.get(iid)
    assert rec is not None
    assert rec.waiting is None
    assert rec.projection().comparable() == fold(store.events(iid)).comparable()


def test_a_signal_moves_the_version_on_so_a_concurrent_park_loses(store: Store) -> None:
    claim = started(store, type_=TYPE)
    iid = claim.instance.id
    store.signal(NewSignal(iid, "approved", "early"))  # arrives while the step runs
    rec = store.get(iid)
    assert rec is not None
    assert rec.version > claim.instance.version
    exc = Parked(key="0", kind="signal", name="approved", token="T1", until=None)
    d = park(claim.instance.projection(in_flight=True), "ask", 1, exc, 0)
    with pytest.raises(ConcurrencyConflict):
        store.apply(Commit(iid, claim.instance.version, d, "w"))
    assert store.signal_counts(instance_id=iid)["pending"] == 1  # still buffered


def test_a_token_of_an_earlier_wait_is_stale_and_counted(store: Store) -> None:
    iid = waiting(store, token="T2")
    sid = store.signal(NewSignal(iid, "approved", "late", token="T1"))
    claim = claim_one(store, type_=TYPE)
    store.apply(resume(store, claim))
    counts = store.signal_counts(instance_id=iid)
    assert (counts["stale"], counts["applied"], counts["pending"]) == (1, 0, 0)
    assert store.signal_counts()["stale"] == 1
    dropped = [e for e in store.events(iid) if e.event_type == Ev.STALE_SIGNAL_DROPPED]
    assert [e.payload["signal"] for e in dropped] == [sid]
    rec = store.get(iid)
    assert rec is not None
    assert rec.waiting == "0"  # still waiting: parked again, nothing ran
    assert store.claim(worker="w", types=[TYPE], lease=300) == []


def test_an_untokened_signal_for_another_wait_stays_pending(store: Store) -> None:
    iid = waiting(store)
    sid = store.signal(NewSignal(iid, "second", "later"))
    assert store.claim(worker="w", types=[TYPE], lease=300) == []  # not its wait: no wake-up
    assert [s.id for s in store.pending_signals(iid)] == [sid]
    assert store.signal_counts(instance_id=iid)["pending"] == 1
    delayed = store.signal(NewSignal(iid, "second", "much later", delay=3600))
    assert [s.id for s in store.pending_signals(iid)] == [sid]  # pending, not yet due
    assert [s.id for s in store.signals(instance_id=iid)] == [delayed, sid]


def test_signals_are_listed_newest_first(store: Store) -> None:
    a, b = waiting(store), waiting(store)
    ids = [store.signal(NewSignal(i, "second", n)) for n, i in enumerate([a, b, a])]
    assert [s.id for s in store.signals()] == ids[::-1]
    assert [s.id for s in store.signals(limit=2)] == ids[:0:-1]
    assert [s.id for s in store.signals(instance_id=a)] == [ids[2], ids[0]]
    assert store.signal_counts(instance_id=a)["pending"] == 2
    assert store.signal_counts()["pending"] == 3


def test_an_ending_instance_dead_letters_its_signals_and_voids_its_timer(store: Store) -> None:
    iid = waiting(store, until=4102444800.0)  # a timer row, due in 2100
    store.signal(NewSignal(iid, "second", {"n": 1}))
    cancelled(store, iid)
    rec = store.get(iid)
    assert rec is not None
    assert rec.status == Status.CANCELLED
    counts = store.signal_counts(instance_id=iid)
    assert (counts["dead"], counts["void"], counts["pending"]) == (1, 1, 0)
    [letter] = store.dead_letters()
    assert letter["instance_id"] == iid
    assert letter["envelope"]["name"] == "second"


def test_a_finish_dead_letters_a_signal_its_decision_never_saw(store: Store) -> None:
    # Buffered while the step ran (no wait asked for it): the finish's decision settles
    # nothing, so the store's end of the instance is what dead-letters it (SQLite's probe
    # and PostgreSQL's swf_finish_rest, run only when there is something to do).
    claim = started(store, type_=TYPE)
    iid = claim.instance.id
    store.signal(NewSignal(iid, "second", {"n": 1}))
    rec = store.get(iid)  # the signal moved the version (its wake-up's fence)
    assert rec is not None
    d = decide.cancel(rec.projection(in_flight=True), leased=False)
    assert isinstance(d.task, Finish)
    assert (d.signals.settled, d.signals.dead) == ((), ())
    store.apply(Commit(iid, rec.version, d, "w"))
    assert store.signal_counts(instance_id=iid)["dead"] == 1
    [letter] = store.dead_letters()
    assert (letter["instance_id"], letter["envelope"]["name"]) == (iid, "second")
    assert letter["reason"] == "the instance ended before the signal was applied"
