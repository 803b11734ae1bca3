"""A claim that fires a due timer, on SQLite and PostgreSQL.

A waiting instance whose one due pending row is its wait's own timer is resumed by the
claim itself (``claim`` in both dialects' ``queries.sql``): ``TIMER_FIRED`` and the step's
``STEP_STARTED`` in the claim's commit, the timer applied. These tests pin that SQL to the
Python it stands in for: ``waits.deliver`` on the same rows (its events and projection)
and ``fold`` of the log. Any other wait is left to the runner's deliver commit.
"""

from __future__ import annotations

import time

import pytest

from statemachine_wf.core.fold import fold
from statemachine_wf.core.store import Commit, Store
from statemachine_wf.core.waits import NewSignal, deliver, park
from statemachine_wf.definition.events import Ev
from statemachine_wf.errors import Parked

from .helpers import claim_one, started
from .test_instance_log import assert_row_is_the_fold
from .test_signals import LIMIT, SPEC, TYPE, resume


def parked(store: Store, kind: str, *, until: float) -> str:
    """An Approval instance parked on wait "0" (a sleep, or a wait for 'approved') with a
    timer due at ``until``, after a first attempt that failed once (``failures`` 1)."""
    claim = started(store, type_=TYPE)
    name = "approved" if kind == "signal" else None
    exc = Parked(key="0", kind=kind, name=name, token="T1", until=until)
    step = claim.instance.step
    assert step is not None
    d = park(claim.instance.projection(in_flight=True), step, 1, exc, 1)
    store.apply(Commit(claim.instance.id, claim.instance.version, d, "w"))
    return claim.instance.id


def shape(events: object) -> list[tuple[object, ...]]:
    return [(e.event_type, e.node, e.attempt, e.payload) for e in events]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("kind", "outcome"), [("sleep", "slept"), ("signal", "timeout")])
def test_a_claim_fires_a_due_timer_as_deliver_would(store: Store, kind: str, outcome: str) -> None:
    iid = parked(store, kind, until=time.time() - 1)
    before = store.get(iid)
    assert before is not None
    log = store.events(iid)
    [timer] = store.pending_signals(iid)
    expected = deliver(SPEC, before.projection(), [timer], max_payload=LIMIT)

    claim = claim_one(store, type_=TYPE)

    assert claim.started
    assert claim.instance.version == before.version + 1
    written = store.events(iid)[len(log) :]
    assert shape(written) == shape(expected.events)
    assert [e.event_type for e in written] == [Ev.TIMER_FIRED, Ev.STEP_STARTED]
    assert written[0].payload == {"wait": "0", "outcome": outcome, "signal": timer.id}
    state = claim.instance.projection(in_flight=claim.task.in_flight)
    assert state.comparable() == expected.state.comparable()
    assert state.waits["0"]["outcome"] == outcome
    assert state.waiting is None
    assert_row_is_the_fold(store, iid)
    assert fold(store.events(iid)).comparable() == state.comparable()
    # The task as the deliver commit's Continue leaves it: in flight, no failures.
    assert claim.task.in_flight
    assert claim.task.failures == 0
    assert claim.task.attempt == written[1].attempt == 2
    # The timer is applied, and comes with the claim.
    assert [(s.id, s.kind, s.state) for s in claim.signals or ()] == [
        (timer.id, "timer", "applied")
    ]
    counts = store.signal_counts(instance_id=iid)
    assert (counts["applied"], counts["pending"]) == (1, 0)


def test_a_timer_not_yet_due_is_not_fired(store: Store) -> None:
    iid = parked(store, "sleep", until=time.time() + 3600)
    assert store.claim(worker="w", types=[TYPE], lease=300) == []
    assert store.signal_counts(instance_id=iid)["pending"] == 1


@pytest.mark.parametrize("token", [None, "T0"])
def test_a_timer_due_with_another_row_is_left_to_the_deliver_commit(
    store: Store, token: str | None
) -> None:
    """A reply (untokened, or with an earlier wait's token) due beside the timer: deliver's
    ordering and stale rules decide, in the runner, so the claim starts nothing."""
    iid = parked(store, "signal", until=time.time() - 1)
    log = store.events(iid)
    store.signal(NewSignal(iid, "approved", "yes", token=token))

    claim = claim_one(store, type_=TYPE)

    assert not claim.started
    assert claim.instance.waiting == "0"
    assert [s.kind for s in claim.signals or ()] == ["timer", "signal"]
    assert len(store.events(iid)) == len(log)  # the claim wrote no event
    assert store.signal_counts(instance_id=iid)["pending"] == 2
    store.apply(resume(store, claim))
    types = [e.event_type for e in store.events(iid)[len(log) :]]
    assert types[0] == Ev.TIMER_FIRED  # due first, so it decides the wait
    assert types[-1] == Ev.STEP_STARTED
    assert_row_is_the_fold(store, iid)
