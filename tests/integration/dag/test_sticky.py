"""A DAG node task that a runner's commit dispatches is that runner's for ``dag_sticky``
seconds (PostgreSQL, migration 024): other runners' claims pass it over and their idle
loop sleeps until it is theirs to take; nothing else changes (leases, CAS, fencing), so
a task kept too long is late, never lost or run twice."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest

from statemachine_wf import Runner, RunnerOptions, Status
from statemachine_wf.definition.events import Ev
from statemachine_wf.stores.postgres import PostgresStore
from tests.contract import test_dag_siblings as fan

from . import helpers as h

pytestmark = pytest.mark.postgres


@pytest.fixture
def short(pg_dsn: str, pg_schema: str, pg_store: PostgresStore) -> Iterator[PostgresStore]:
    """``pg_store``'s schema, its dispatched tasks sticky for 0.5 s."""
    store = PostgresStore(pg_dsn, schema=pg_schema, dag_sticky=0.5)
    yield store
    store.close()


def _fanned(store: PostgresStore) -> str:
    """An instance whose start node runner "w" committed: three branches dispatched."""
    iid = fan.start(store)
    first = fan.claim(store)  # nobody's yet: a start's task is any runner's
    assert first.task.slot == "s"
    store.dag_commit(fan.completion(store, first, {"x": 1}))  # the commit's worker is "w"
    return iid


def test_dispatched_branches_are_their_runners_for_a_while(short: PostgresStore) -> None:
    iid = _fanned(short)
    # Another runner finds nothing to claim, and is told when the first becomes its.
    assert short.dag_claim(worker="other", types=[fan.FAN.type], lease=300) == []
    wait = short.next_due(types=[], dag_types=[fan.FAN.type], worker="other")
    assert wait is not None
    assert 0.2 < wait <= 0.5
    # The dispatching runner claims them now; asked without a runner, they are due.
    assert short.next_due(types=[], dag_types=[fan.FAN.type], worker="w") == 0
    assert short.next_due(types=[], dag_types=[fan.FAN.type]) == 0
    mine = fan.claim(short, "w")
    assert mine.instance.id == iid
    assert mine.task.slot in {"b0", "b1", "b2"}
    # Once the while is over, the others' claims take the rest, each once.
    time.sleep(wait + 0.05)
    assert short.next_due(types=[], dag_types=[fan.FAN.type], worker="other") == 0
    taken = {fan.claim(short, "other").task.slot for _ in range(2)}
    assert taken == {"b0", "b1", "b2"} - {mine.task.slot}
    assert short.dag_claim(worker="other", types=[fan.FAN.type], lease=300) == []


def test_a_runner_finishes_the_tasks_a_dead_runner_kept_once_they_are_free(
    short: PostgresStore,
) -> None:
    # Runner "w" dispatched the branches and died: another runner's run_until_idle counts
    # them as work left (not idle), sleeps until they are free, and runs each once.
    iid = _fanned(short)
    began = time.monotonic()
    runner = Runner(short, [], dags=h.registry, options=RunnerOptions(concurrency=2))
    runner.run_until_idle(timeout=30, settle=0.1)
    took = time.monotonic() - began
    record = short.get(iid)
    assert record is not None
    assert record.status == Status.COMPLETED
    assert took >= 0.3  # not before the branches were free (0.5 s after their dispatch)
    done = [str(e.node) for e in short.events(iid) if e.event_type == Ev.NODE_COMPLETED]
    assert sorted(done) == ["b0", "b1", "b2", "e", "s"]


def test_a_task_taken_in_the_commit_is_leased_not_kept(short: PostgresStore) -> None:
    # A sibling taken by the committing worker is leased to it: stickiness is only for
    # tasks left due; the lease is what fences the taken one, as before.
    iid = _fanned(short)
    first = fan.claim(short, "w")
    applied = short.dag_commit(fan.completion(short, first, 1), take="sibling", lease=300)
    assert applied.task is not None
    stored = short.task(iid, applied.task.slot)
    assert stored is not None
    assert stored.lease_owner == "w"


def test_the_default_keeps_them_a_second(pg_store: PostgresStore) -> None:
    assert pg_store.dag_sticky == 1.0
    _fanned(pg_store)
    assert pg_store.dag_claim(worker="other", types=[fan.FAN.type], lease=300) == []
    wait = pg_store.next_due(types=[], dag_types=[fan.FAN.type], worker="other")
    assert wait is not None
    assert 0.5 < wait <= 1.0


def test_with_no_stickiness_any_runner_claims_them_at_once(
    pg_dsn: str, pg_schema: str, pg_store: PostgresStore
) -> None:
    store = PostgresStore(pg_dsn, schema=pg_schema, dag_sticky=0)
    try:
        _fanned(store)
        assert store.next_due(types=[], dag_types=[fan.FAN.type], worker="other") == 0
        got = fan.claim(store, "other")
        assert got.task.slot in {"b0", "b1", "b2"}
    finally:
        store.close()


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf])
def test_a_bad_stickiness_is_refused_by_name(pg_dsn: str, pg_schema: str, bad: float) -> None:
    with pytest.raises(ValueError, match="dag_sticky must be >= 0 seconds"):
        PostgresStore(pg_dsn, schema=pg_schema, dag_sticky=bad)
