"""PostgreSQL: a start made where a worker of its type sleeps is handed to that worker.

Every runner process LISTENs on the schema's channel, so a start's NOTIFY woke an idle
worker in each of them, and all but one claim found nothing. A create due at once,
through a store object whose worker sleeps and claims the type, wakes that worker and
notifies nobody; otherwise it notifies as before (docs/architecture.md, "A start kept in
its process").

What reaches the other processes is read off a LISTEN connection of the test's own
(heard.py).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import ClassVar

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
from statemachine_wf.definition.events import Ev
from statemachine_wf.stores.postgres import PostgresStore

from .heard import heard_on
from .sleepers import Sleeper, until

pytestmark = pytest.mark.postgres

TYPE = "kept.v1"


@pytest.fixture
def heard(pg_store: PostgresStore, pg_dsn: str) -> Iterator[Callable[[], list[str]]]:
    """What the schema's channel carried since the last call (a process of its own)."""
    with heard_on(pg_store, pg_dsn) as drain:
        yield drain


def _new(**kw: object) -> NewInstance:
    return NewInstance(str(uuid.uuid4()), TYPE, {}, "first", **kw)  # type: ignore[arg-type]


def test_a_start_wakes_the_worker_of_its_type_asleep_here_and_notifies_nobody(
    pg_store: PostgresStore, heard: Callable[[], list[str]]
) -> None:
    sleeper = Sleeper(pg_store, [TYPE])
    new = _new()
    assert pg_store.create(new) == (new.id, True)
    woken, slept = sleeper.join()
    assert woken
    assert slept < 30  # by the start, not by the 60 s timeout
    assert heard() == []  # no other process was told
    assert pg_store.next_due(types=[TYPE]) == 0  # and the task is there, due


def test_a_dag_start_wakes_the_worker_of_its_type_asleep_here_and_notifies_nobody(
    pg_store: PostgresStore, heard: Callable[[], list[str]]
) -> None:
    from tests.contract.test_dag_runs import DAG_TYPE
    from tests.contract.test_dag_runs import start as dag_start

    pg_store.register_types([DAG_TYPE], by="test", kind="dag")
    assert dag_start(pg_store)[1]  # nobody asleep: told
    assert heard() == [DAG_TYPE]
    sleeper = Sleeper(pg_store, [TYPE, DAG_TYPE])
    assert dag_start(pg_store)[1]
    assert sleeper.join()[0]
    assert heard() == []


def test_a_start_with_no_worker_of_its_type_asleep_here_notifies_every_process(
    pg_store: PostgresStore, heard: Callable[[], list[str]]
) -> None:
    assert pg_store.create(_new())[1]  # nobody asleep at all
    assert heard() == [TYPE]
    other = Sleeper(pg_store, ["other.v1"])  # asleep, but it never claims this type
    assert pg_store.create(_new())[1]
    assert heard() == [TYPE]
    assert other.join()[0]  # the store's own LISTEN woke it, as before


def test_a_delayed_start_notifies_though_a_worker_of_its_type_sleeps_here(
    pg_store: PostgresStore, heard: Callable[[], list[str]]
) -> None:
    """Other processes' timer holders must learn the due time."""
    sleeper = Sleeper(pg_store, [TYPE])
    assert pg_store.create(_new(delay=30.0))[1]
    assert heard() == [TYPE]
    assert sleeper.join()[0]  # woken by the store's own LISTEN
    assert pg_store.create(_new(run_at=time.time() + 30))[1]
    assert heard() == [TYPE]


def test_one_sleeper_is_taken_by_one_start_at_a_time(
    pg_store: PostgresStore, heard: Callable[[], list[str]]
) -> None:
    """A start in flight holds the sleeper it took: the next one while it does tells
    everyone, and nothing else wakes that sleeper meanwhile."""
    sleeper = Sleeper(pg_store, [TYPE])
    taken = pg_store._wakeup.promise(TYPE)  # a start in flight, say
    assert taken is not None
    assert pg_store.create(_new())[1]
    assert heard() == [TYPE]  # the sleeper was taken by the start in flight
    time.sleep(0.2)  # the store's own LISTEN hears that create: it wakes nobody taken
    assert sleeper.woken == []
    pg_store._wakeup.keep(taken[0], TYPE)  # the start in flight committed
    assert sleeper.join()[0]


RUNNER = Claimant("runner-1", 30.0, "host:1:abc", frozenset({TYPE}))


def test_a_leased_start_notifies_nobody(
    pg_store: PostgresStore, heard: Callable[[], list[str]]
) -> None:
    """What the lease itself writes is in test_start_leased.py (both stores)."""
    sleeper = Sleeper(pg_store, [TYPE], RUNNER)
    new = _new()
    assert pg_store.create(new) == (new.id, True)
    assert sleeper.join()[0]
    assert heard() == []
    claim = pg_store.handed_claim(RUNNER)
    assert claim is not None
    assert claim.instance.id == new.id


def test_a_start_not_leased_where_the_sleeper_claims_it_as_a_dag_or_has_no_claimant(
    pg_store: PostgresStore, heard: Callable[[], list[str]]
) -> None:
    dag_only = Claimant("runner-1", 30.0, "host:1:abc", frozenset())
    for claimant in (None, dag_only):
        sleeper = Sleeper(pg_store, [TYPE], claimant)
        assert pg_store.create(_new())[1]
        assert sleeper.join()[0]
        assert heard() == []
        assert claimant is None or pg_store.handed_claim(claimant) is None
        assert pg_store.next_due(types=[TYPE]) == 0  # due: the woken worker claims it
        [claim] = pg_store.claim(worker="w", types=[TYPE], lease=30.0)
        assert claim.started


def test_a_start_with_a_claim_of_its_type_under_way_here_is_left_to_that_claim(
    pg_store: PostgresStore, heard: Callable[[], list[str]]
) -> None:
    """As a held notification: the claim sent after the commit sees the task."""
    sleeper = Sleeper(pg_store, [TYPE])
    with pg_store._wakeup.claiming([TYPE]) as sent:
        assert pg_store.create(_new())[1]
        assert heard() == []
        assert pg_store._wakeup.sleeping == 1  # left asleep: the claim covers it
        sent()
    assert pg_store._wakeup.sleeping == 1  # covered: nobody woken
    pg_store.nudge()
    assert sleeper.join()[0]


def test_a_start_while_a_claim_of_its_type_is_in_flight_here_is_held_here_then_told(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str, heard: Callable[[], list[str]]
) -> None:
    """No worker of the type asleep here, and a claim of it under way: the start tells
    nobody, lest each other process's idle worker claim for a task the runner here may
    take. That claim returned and no worker here asleep for it, the others are told."""
    other = PostgresStore(pg_dsn, schema=pg_schema)
    try:
        there = Sleeper(other, [TYPE])  # another process's idle worker
        with pg_store._wakeup.claiming([TYPE]) as sent:
            sent()  # in flight: its snapshot may be older than the start's commit
            assert pg_store.create(_new())[1]
            assert heard() == []
            assert other._wakeup.sleeping == 1
        assert heard() == [TYPE]  # announced once the claim returned
        woken, slept = there.join()
        assert woken
        assert slept < 30  # by the announcement, not by its 60 s timeout
        assert pg_store.next_due(types=[TYPE]) == 0
    finally:
        other.close()


def test_a_start_held_here_wakes_a_worker_here_once_the_claim_under_way_returned(
    pg_store: PostgresStore, heard: Callable[[], list[str]]
) -> None:
    with pg_store._wakeup.claiming([TYPE]) as sent:
        sent()
        assert pg_store.create(_new())[1]
        sleeper = Sleeper(pg_store, [TYPE])  # a worker done with its step, asleep
        assert heard() == []
        assert pg_store._wakeup.sleeping == 1  # held while the claim is in flight
    woken, slept = sleeper.join()
    assert woken
    assert slept < 30
    assert heard() == []  # nobody else was told
    assert pg_store.next_due(types=[TYPE]) == 0


def test_a_start_that_found_its_key_taken_wakes_nobody(
    pg_store: PostgresStore, heard: Callable[[], list[str]]
) -> None:
    first = _new(idempotency_key="k-1")
    assert pg_store.create(first) == (first.id, True)
    assert heard() == [TYPE]
    sleeper = Sleeper(pg_store, [TYPE])
    assert pg_store.create(_new(idempotency_key="k-1")) == (first.id, False)
    assert heard() == []
    assert pg_store._wakeup.sleeping == 1  # asleep again: the promise given back
    pg_store.nudge()
    assert sleeper.join()[0]


# -- two runners, each on a store object of its own (two processes, as far as the wake-ups
# go: each has its own LISTEN and its own idle workers) ---------------------------------
class In(BaseModel):
    n: int = 0


RAN: list[tuple[int, str]] = []
"""(input n, the runner that ran it) for every run of Quick's step."""


class Quick(Workflow[In, BaseModel]):
    workflow_type = "t.kept_local.quick.v1"
    where: str  # a dependency: which runner this is

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, BaseModel]) -> None:
        RAN.append((ctx.input.n, self.where))


class Held(Workflow[In, BaseModel]):
    workflow_type = "t.kept_local.held.v1"
    gate: ClassVar[threading.Event] = threading.Event()
    where: str

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, BaseModel]) -> None:
        assert Held.gate.wait(60)


def test_starts_run_where_they_are_made_while_a_worker_is_idle_there(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """No process but the starter's hears of them; each runs once, on the starter's
    runner. The other runner's safety poll (60 s) is never what runs them."""
    other = PostgresStore(pg_dsn, schema=pg_schema)
    slow = RunnerOptions(concurrency=2, idle_poll=60, reconcile_on_start=False)
    here = Runner(pg_store, [Quick], options=slow, dependencies={"where": "here"})
    there = Runner(other, [Quick], options=slow, dependencies={"where": "there"})
    client = Client(pg_store, [Quick])
    RAN.clear()
    here.start()
    there.start()
    try:
        until(lambda: other._wakeup.sleeping == 2)  # there's workers asleep for 60 s
        ids = []
        for n in range(20):
            until(lambda: pg_store._wakeup.sleeping == 2)  # both of here's workers idle
            ids.append(client.start(Quick, In(n=n)))
            until(lambda: client.get(ids[-1]).status == Status.COMPLETED)
        for iid in ids:
            started = [e for e in client.history(iid) if e.event_type == Ev.STEP_STARTED]
            assert len(started) == 1
        assert sorted(RAN) == [(n, "here") for n in range(20)]
    finally:
        here.stop()
        there.stop()
        other.close()


def test_a_start_made_where_every_worker_is_busy_reaches_the_other_process(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    other = PostgresStore(pg_dsn, schema=pg_schema)
    slow = RunnerOptions(concurrency=1, idle_poll=60, reconcile_on_start=False)
    types = [Quick, Held]
    here = Runner(pg_store, types, options=slow, dependencies={"where": "here"})
    there = Runner(other, [Quick], options=slow, dependencies={"where": "there"})
    client = Client(pg_store, types)
    Held.gate.clear()
    RAN.clear()
    here.start()
    try:
        held = client.start(Held, In())
        until(lambda: client.get(held).status == Status.RUNNING)
        until(lambda: pg_store._wakeup.sleeping == 0)  # here's one worker runs Held
        there.start()
        until(lambda: other._wakeup.sleeping == 1)  # there's worker idle, polling at 60 s
        quick = [client.start(Quick, In(n=n)) for n in range(3)]
        # Run there, woken by the starts' notifications.
        until(lambda: all(client.get(i).status == Status.COMPLETED for i in quick))
        assert sorted(RAN) == [(n, "there") for n in range(3)]
    finally:
        Held.gate.set()
        here.stop()
        there.stop()
        other.close()
    assert client.get(held).status == Status.COMPLETED


def test_a_start_from_another_process_wakes_the_runner_of_its_type_here(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """Two runners of different types on one store object sleep in one queue; the
    notification of a start made elsewhere wakes the worker that claims its type, though
    the other runner's worker fell asleep first (its safety poll is 60 s)."""
    other = PostgresStore(pg_dsn, schema=pg_schema)
    slow = RunnerOptions(concurrency=1, idle_poll=60, reconcile_on_start=False)
    first = Runner(pg_store, [Held], options=slow, dependencies={"where": "here"})
    second = Runner(pg_store, [Quick], options=slow, dependencies={"where": "here"})
    RAN.clear()
    first.start()
    try:
        until(lambda: pg_store._wakeup.sleeping == 1)  # Held's worker asleep first
        second.start()
        until(lambda: pg_store._wakeup.sleeping == 2)
        client = Client(other, [Quick])
        for n in range(3):
            iid = client.start(Quick, In(n=n))  # from another store object: notified
            until(partial(_completed, client, iid), timeout=20)
            until(lambda: pg_store._wakeup.sleeping == 2)
        assert sorted(RAN) == [(n, "here") for n in range(3)]
    finally:
        first.stop()
        second.stop()
        other.close()


def _completed(client: Client, instance_id: str) -> bool:
    return client.get(instance_id).status == Status.COMPLETED
