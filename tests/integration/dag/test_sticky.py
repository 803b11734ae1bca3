"""A DAG node task that a runner's commit dispatches is that runner's for ``dag_sticky``
seconds (PostgreSQL, migration 024): other runners' claims pass it over and their idle
loop sleeps until it is theirs to take; nothing else changes (leases, CAS, fencing), so
a task kept too long is late, never lost or run twice."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator

import pytest

from statemachine_wf import Runner, RunnerOptions, Status
from statemachine_wf.definition.events import Ev
from statemachine_wf.runtime.dag_executor import DagExecutor
from statemachine_wf.runtime.dag_keep import work
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


@pytest.fixture
def long(pg_dsn: str, pg_schema: str, pg_store: PostgresStore) -> Iterator[PostgresStore]:
    """``pg_store``'s schema, its dispatched tasks sticky for 5 s: for tests that need
    them still kept however slow the box is between two statements."""
    store = PostgresStore(pg_dsn, schema=pg_schema, dag_sticky=5.0)
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


def test_a_commit_keeps_only_its_first_dispatched_tasks_when_told(long: PostgresStore) -> None:
    fan.start(long)
    first = fan.claim(long)
    long.dag_commit(fan.completion(long, first, {"x": 1}), keep=1)
    # b0 is "w"'s for a while; the other two are anyone's at once.
    taken = {fan.claim(long, "other").task.slot for _ in range(2)}
    assert taken == {"b1", "b2"}
    assert long.dag_claim(worker="other", types=[fan.FAN.type], lease=300) == []
    assert fan.claim(long, "w").task.slot == "b0"


def test_a_commit_told_to_keep_none_leaves_them_all_to_anyone(short: PostgresStore) -> None:
    fan.start(short)
    first = fan.claim(short)
    short.dag_commit(fan.completion(short, first, {"x": 1}), keep=0)
    taken = {fan.claim(short, "other").task.slot for _ in range(3)}
    assert taken == {"b0", "b1", "b2"}


def test_a_runner_keeps_only_what_its_workers_will_start_within_the_while(
    long: PostgresStore,
) -> None:
    # A runner of two workers that measured 4 s a branch's function starts two in the 5 s its
    # tasks are kept: of the three branches its commit dispatches it keeps two
    # (runtime/dag_keep.py), and another runner takes the third at once.
    fan.start(long)
    first = fan.claim(long, "w")
    loop = asyncio.new_event_loop()
    executor = DagExecutor(long, h.registry, worker="w", loop=lambda: loop, threads=2)
    try:
        branch = work(fan.GRAPH, "b0")  # each calls the same function
        executor._keeper.ran(branch, 4.0)  # as if it had run it before
        assert executor.run(first) is None  # three dispatched: none handed over
    finally:
        executor.close()
        loop.close()
    got = fan.claim(long, "other")
    assert got.task.slot == "b2"
    assert long.dag_claim(worker="other", types=[fan.FAN.type], lease=300) == []
    mine = {fan.claim(long, "w").task.slot for _ in range(2)}
    assert mine == {"b0", "b1"}


def test_tasks_kept_can_be_given_back_past_the_first_ones(long: PostgresStore) -> None:
    iid = _fanned(long)  # all three kept to "w"
    assert long.dag_unkeep(iid, worker="someone else", keep=0) == 0  # not theirs
    assert long.dag_unkeep(iid, worker="w", keep=1) == 2
    taken = {fan.claim(long, "other").task.slot for _ in range(2)}
    assert taken == {"b1", "b2"}  # the last dispatched; b0 still "w"'s
    assert long.dag_claim(worker="other", types=[fan.FAN.type], lease=300) == []
    assert long.dag_unkeep(iid, worker="w", keep=1) == 0  # nothing more to give
    assert fan.claim(long, "w").task.slot == "b0"


def test_a_runner_gives_back_what_it_kept_blind_once_it_measures_the_work(
    long: PostgresStore,
) -> None:
    # The branches' function was not measured when "w" dispatched them: all three kept.
    # Its worker runs one; the measure (as if it had taken 6 s) says its two workers
    # start one more in the 5 s kept, so it gives the third back.
    iid = fan.start(long)
    loop = asyncio.new_event_loop()
    executor = DagExecutor(long, h.registry, worker="w", loop=lambda: loop, threads=2)
    try:
        assert executor.run(fan.claim(long, "w")) is None
        assert long.dag_claim(worker="other", types=[fan.FAN.type], lease=300) == []
        mine = fan.claim(long, "w")
        executor._give_back_kept(work(fan.GRAPH, "b0"), 6.0)
    finally:
        executor.close()
        loop.close()
    got = fan.claim(long, "other")
    assert got.instance.id == iid
    assert got.task.slot != mine.task.slot
    assert long.dag_claim(worker="other", types=[fan.FAN.type], lease=300) == []


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
