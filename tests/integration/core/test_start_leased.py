"""A start leased in its own commit to a worker asleep in its process, on both stores.

Due now, made through a store object whose worker sleeps and claims its type (with a
claimant): the start's commit leases the task to that worker and starts its first step,
and the worker runs it with no claim (docs/architecture.md, "A start kept in its
process"). PostgreSQL's notification side is in ``test_start_kept_local.py``.
"""

from __future__ import annotations

import time
import uuid

import pytest
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    Runner,
    RunnerOptions,
    Status,
    StepContext,
    Workflow,
    step,
)
from statemachine_wf.core.records import Claimant, NewInstance
from statemachine_wf.core.store import Store
from statemachine_wf.definition.events import Ev

from .sleepers import Sleeper, sleeping, until

TYPE = "leased.v1"
RUNNER = Claimant("runner-1", 30.0, "host:1:abc", frozenset({TYPE}))


def _new(**kw: object) -> NewInstance:
    return NewInstance(str(uuid.uuid4()), TYPE, {}, "first", **kw)  # type: ignore[arg-type]


def test_a_start_leases_its_task_to_the_claimant_asleep_and_starts_its_step(
    store: Store,
) -> None:
    """The start's commit is the claim: the first step started, the task in flight
    under a fresh token of the claimant's incarnation, the row the fold of the log."""
    sleeper = Sleeper(store, [TYPE], RUNNER)
    new = _new()
    assert store.create(new) == (new.id, True)
    assert sleeper.join()[0]
    claim = store.handed_claim(RUNNER)
    assert claim is not None
    assert store.handed_claim(RUNNER) is None  # handed once
    assert claim.started
    assert claim.instance.id == new.id
    assert claim.instance.status == Status.RUNNING
    assert (claim.instance.step, claim.instance.step_attempts) == ("first", 1)
    assert claim.instance.attempts == {"first": 1}
    assert claim.task.lease_owner == "runner-1"
    assert claim.task.lease_token is not None
    assert claim.task.lease_token.startswith("host:1:abc/")
    assert (claim.task.node, claim.task.attempt, claim.task.in_flight) == ("first", 1, True)
    assert claim.task.due_at > time.time() + 20  # its due time is the lease
    assert claim.instance == store.get(new.id)
    events = [(e.event_type, e.node, e.attempt, e.worker) for e in store.events(new.id)]
    assert events == [
        (Ev.CREATED, None, None, None),
        (Ev.STEP_STARTED, "first", 1, "runner-1"),
    ]
    assert Client(store).verify(new.id) == {}  # the row is the fold of its log
    due = store.next_due(types=[TYPE])
    assert due is not None
    assert due > 20  # nobody else's claim sees it due
    assert store.claim(worker="w2", types=[TYPE], lease=30.0) == []


def test_a_start_whose_key_is_taken_leases_nothing(store: Store) -> None:
    first = _new(idempotency_key="k-1")
    assert store.create(first) == (first.id, True)
    before = store.events(first.id)
    sleeper = Sleeper(store, [TYPE], RUNNER)
    again = _new(idempotency_key="k-1")
    assert store.create(again) == (first.id, False)
    store.nudge()
    sleeper.join()
    assert store.handed_claim(RUNNER) is None
    assert store.events(first.id) == before
    assert store.get(again.id) is None


def test_a_leased_start_whose_rows_do_not_read_back_still_returns_its_id(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit is made: the start must not fail. Nothing is handed over; the sleeper
    is woken, and the task stays leased until its lease runs out."""

    def unreadable(raw: object) -> object:
        raise ValueError("stored instance: too deep")

    monkeypatch.setattr(store, "_checked", unreadable)
    sleeper = Sleeper(store, [TYPE], RUNNER)
    new = _new()
    assert store.create(new) == (new.id, True)
    assert sleeper.join()[0]
    assert store.handed_claim(RUNNER) is None
    task = store.task(new.id)
    assert task is not None
    assert task.lease_owner == "runner-1"


def test_a_delayed_start_is_not_leased(store: Store) -> None:
    sleeper = Sleeper(store, [TYPE], RUNNER)
    new = _new(delay=30.0)
    assert store.create(new)[1]
    store.nudge()
    sleeper.join()
    assert store.handed_claim(RUNNER) is None
    assert [e.event_type for e in store.events(new.id)] == [Ev.CREATED]
    task = store.task(new.id)
    assert task is not None
    assert task.lease_owner is None


class In(BaseModel):
    n: int = 0


class Quick(Workflow[In, BaseModel]):
    workflow_type = "t.leased.quick.v1"

    @step(initial=True, to="second")
    def first(self, ctx: StepContext[In, BaseModel]) -> None:
        pass

    @step(to=COMPLETED)
    def second(self, ctx: StepContext[In, BaseModel]) -> None:
        pass


def test_starts_made_while_the_runner_idles_run_under_the_start_s_own_lease(
    store: Store,
) -> None:
    """Each start, made with the runner's workers asleep, is run by them with no claim:
    its first STEP_STARTED is in the start's commit (the same time as WORKFLOW_CREATED,
    the runner's worker), and each step runs once."""
    options = RunnerOptions(concurrency=2, idle_poll=60, reconcile_on_start=False)
    runner = Runner(store, [Quick], options=options)
    client = Client(store, [Quick])
    runner.start()
    try:
        ids = []
        for n in range(10):
            until(lambda: sleeping(store) == 2)  # both workers idle
            ids.append(client.start(Quick, In(n=n)))
            until(lambda: client.get(ids[-1]).status == Status.COMPLETED)
    finally:
        runner.stop()
    for iid in ids:
        assert_ran_under_the_start_s_lease(client, iid, runner.worker_id)


def assert_ran_under_the_start_s_lease(client: Client, iid: str, worker: str) -> None:
    """``iid``, a :class:`Quick`, ran its first step under its start's lease (one commit
    for WORKFLOW_CREATED and STEP_STARTED, ``worker``'s), each step once."""
    log = client.history(iid)
    created, started = log[0], log[1]
    assert (created.event_type, started.event_type) == (Ev.CREATED, Ev.STEP_STARTED)
    assert started.created_at == created.created_at  # one commit
    assert started.worker == worker
    kinds = [e.event_type for e in log]
    assert kinds.count(Ev.STEP_STARTED) == 2
    assert kinds.count(Ev.STEP_COMPLETED) == 2
    assert client.verify(iid) == {}


def test_a_claim_leased_to_a_sleeper_whose_sleep_ran_out_is_released_by_its_runner(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sleep ran out between the start's promise and its commit, and the runner
    stopped before a thread of it looked again: its stop releases the claim, due at once
    for whoever runs next, its first attempt counted and marked as never run
    (STEP_RELEASED): the next claim starts the second attempt itself."""
    runner = Runner(store, [Quick], options=RunnerOptions(concurrency=1))
    sleeper = Sleeper(store, [Quick.workflow_type], runner._claimant, timeout=2.0)
    wakeup = store._wakeup  # type: ignore[attr-defined]
    taken = wakeup.promise(Quick.workflow_type)
    assert taken is not None
    assert sleeper.join()[0] is False  # ran out
    # The next start takes that sleeper (its thread gone on): as if promised just before.
    monkeypatch.setattr(wakeup, "promise", lambda type_: (taken[0], runner._claimant))
    iid = Client(store, [Quick]).start(Quick, In(n=1))
    assert store.next_due(types=[Quick.workflow_type]) != 0  # leased to the runner
    runner.stop()  # never started: no worker looks again
    assert store.handed_claim(runner._claimant) is None
    assert store.next_due(types=[Quick.workflow_type]) == 0
    [claim] = store.claim(worker="w", types=[Quick.workflow_type], lease=30.0)
    assert claim.instance.id == iid
    assert (claim.started, claim.task.attempt) == (True, 2)  # not in doubt: never ran
    released = [
        (e.node, e.attempt, e.worker) for e in store.events(iid) if e.event_type == Ev.STEP_RELEASED
    ]
    assert released == [("first", 1, runner.worker_id)]
